//! The FFI boundary, and the only module allowed to use `unsafe`: thin, safe wrappers around the
//! platform calls that neither std nor rustix offer safely. Each `unsafe`
//! block carries a `// SAFETY:` comment saying why it is sound.

#[cfg(unix)]
pub(crate) mod unix;
#[cfg(windows)]
pub(crate) mod windows;
