//! Windows: console handles and anonymous pipes cannot be registered with a
//! reactor, so stdin and stdout are driven from `blocking`'s thread pool. They
//! are two different handles, so a pending read never serializes a write.

use std::fs::File;
use std::io;
use std::os::windows::io::AsHandle;

use smol::Unblock;

use crate::relay::BUFFER_SIZE;

pub(super) type Input = Unblock<File>;
pub(super) type Output = Unblock<File>;

pub(super) fn stdin() -> io::Result<Input> {
    let handle = io::stdin().as_handle().try_clone_to_owned()?;
    Ok(Unblock::with_capacity(BUFFER_SIZE, File::from(handle)))
}

pub(super) fn stdout() -> io::Result<Output> {
    let handle = io::stdout().as_handle().try_clone_to_owned()?;
    Ok(Unblock::with_capacity(BUFFER_SIZE, File::from(handle)))
}
