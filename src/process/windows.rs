//! Stopping a child on Windows, with everything it started: each child runs
//! in a job object of its own, the analogue of a Unix process group.
//!
//! # The job
//!
//! `cmd /c npx server` starts `node`, which outlives `cmd` when only `cmd` is
//! terminated. So every child is created suspended, put in a new job object
//! with `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`, and only then resumed, so
//! that nothing it starts escapes the job (a process created by a process in
//! a job is in the job too: "By default, processes created by a process
//! associated with a job are associated with the job", `CreateJobObjectW`,
//! and the limit: "Causes all processes associated with the job to
//! terminate when the last handle to the job is closed",
//! `JOBOBJECT_BASIC_LIMIT_INFORMATION`). We hold the only handle to the job:
//! when it closes, whether we drop it or our process dies in any way (a
//! crash, `TerminateProcess`), the system ends every process in it.
//!
//! The stop sequence is the module's: stdin closed and [`SHUTDOWN_GRACE`];
//! Windows has no polite signal to send, so the next step is
//! `TerminateJobObject`, which ends the child and all it started at once.
//!
//! std's `Command` does not hand out the thread handle of the process it
//! created, so the suspended child's thread is found in a Toolhelp snapshot
//! and resumed by id. If the job cannot be made or the child cannot be put
//! in it (Windows 7 refuses a process already in another job, when we run
//! inside one), the child is resumed without a job, and stopped as before:
//! only itself.
//!
//! # Ctrl+C
//!
//! Children are created with `CREATE_NEW_PROCESS_GROUP`: "If this flag is
//! specified, CTRL+C signals will be disabled for all processes within the
//! new process group" (Process Creation Flags). A Ctrl+C on serve's console
//! then reaches serve, which stops its sessions in order, rather than the
//! children in the middle of a request. (Ctrl+Break still reaches every
//! process on the console, as it always does.)
//!
//! The jobs are kept here, by child id, since the shared code passes ids,
//! not handles: the id is not reused while we hold the child's handle,
//! which outlives its entry.
//!
//! [`SHUTDOWN_GRACE`]: super::SHUTDOWN_GRACE

use std::collections::HashMap;
use std::io;
use std::os::windows::process::CommandExt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use smol::process::Child;
use windows_sys::Win32::System::Threading::{CREATE_NEW_PROCESS_GROUP, CREATE_SUSPENDED};

use crate::ffi::windows::{self as win, Job};

/// The job of each child started by [`contain`] whose job may still hold
/// a process, by child id.
static JOBS: Mutex<Option<HashMap<u32, Job>>> = Mutex::new(None);

fn jobs() -> MutexGuard<'static, Option<HashMap<u32, Job>>> {
    JOBS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Creates the child suspended, in a new process group (see the module
/// docs); [`contain`] puts it in its job and resumes it. Returns `true`:
/// the child leads a group, its job.
pub(super) fn lead_new_group(command: &mut std::process::Command) -> bool {
    command.creation_flags(CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP);
    true
}

/// Puts the suspended `child` in a job of its own and lets it run. Without
/// a job (see the module docs) it runs all the same; only resuming it can
/// fail, and then the caller drops it, which kills it.
pub(super) fn contain(child: &Child) -> io::Result<()> {
    let id = child.id();
    let job = Job::new().and_then(|job| job.assign(child).map(|()| job));
    if let Ok(job) = job {
        jobs().get_or_insert_with(HashMap::new).insert(id, job);
    }
    let resumed = win::resume_threads(id);
    if resumed.is_err() {
        // Closing the job ends the child (the caller's drop would, too).
        kill_group(id);
    }
    resumed
}

/// Whether `child` has a job of ours.
pub(super) fn leads_group(child: &mut Child) -> bool {
    jobs()
        .as_ref()
        .map_or(false, |jobs| jobs.contains_key(&child.id()))
}

/// There is no polite stop on Windows, so this step is skipped.
pub(super) fn terminate(_child: &mut Child, _group: bool) -> bool {
    false
}

/// Ends the child: with its whole job if it has one (`TerminateJobObject`),
/// else alone (`TerminateProcess`).
pub(super) fn kill(child: &mut Child, group: bool) -> io::Result<()> {
    if group {
        let ended = jobs()
            .as_ref()
            .and_then(|jobs| jobs.get(&child.id()))
            .map(Job::terminate);
        if let Some(ended) = ended {
            return ended;
        }
    }
    match child.kill() {
        Ok(()) => Ok(()),
        // It may have exited between our last look and now.
        Err(error) => match child.try_status()? {
            Some(_) => Ok(()),
            None => Err(error),
        },
    }
}

/// Whether a process of the job of child `id` still runs. A job found
/// empty is forgotten (and closed): nothing can join it any more.
pub(super) fn group_alive(id: u32) -> bool {
    let mut jobs = jobs();
    let jobs = match jobs.as_mut() {
        Some(jobs) => jobs,
        None => return false,
    };
    let alive = match jobs.get(&id) {
        Some(job) => job.active_processes().map_or(true, |n| n > 0),
        None => return false,
    };
    if !alive {
        jobs.remove(&id);
    }
    alive
}

/// No polite stop for the rest of a job either.
pub(super) fn terminate_group(_id: u32) {}

/// Ends every process left in the job of child `id`, and forgets the job.
pub(super) fn kill_group(id: u32) {
    if let Some(job) = jobs().as_mut().and_then(|jobs| jobs.remove(&id)) {
        // Closing the job would end them too (KILL_ON_JOB_CLOSE); this
        // says so explicitly, and first.
        let _ = job.terminate();
    }
}
