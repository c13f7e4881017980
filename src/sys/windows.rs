//! Win32 calls without a safe wrapper elsewhere (being written).
