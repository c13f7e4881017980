//! Unix calls without a safe wrapper elsewhere (none needed yet).
