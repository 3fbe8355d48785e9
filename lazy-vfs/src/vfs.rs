//! The SQLite VFS that opens lazily restored databases: SQLite's own default VFS (`unix`),
//! with one change — a main database file that has a sidecar ([`crate::sidecar`]) gets a
//! handle that makes the chunks a read or write touches local first
//! ([`LazyFile::ensure`]) and then calls the default VFS's own method. Every other file, and
//! every database without a sidecar, is the default VFS's handle itself: no cost.
//!
//! This is the one module with `unsafe` code: SQLite calls a VFS through C function pointers
//! on memory it allocates. What makes it sound:
//! - SQLite allocates `szOsFile` bytes (8-byte aligned) for each handle and hands the same
//!   pointer to every method; ours is a [`Handle`] (`#[repr(C)]`: SQLite's `sqlite3_file`
//!   header, our pointer, then the default VFS's handle, `szOsFile` of its own bytes), so the
//!   size we register is the offset of `real` plus the default VFS's size.
//! - The default VFS is only ever given its own handle (`real`) and its own VFS pointer; its
//!   methods never see ours.
//! - `lazy` is an `Arc` turned into a raw pointer at open and turned back exactly once, at
//!   close; SQLite calls no method on a handle after `xClose`.
//! - No Rust panic crosses into C: the methods that run Rust logic catch unwinding and answer
//!   an I/O error.

#![allow(unsafe_code)]

use std::ffi::{CStr, c_int, c_void};
use std::mem::offset_of;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::ptr::{addr_of_mut, null};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use libsqlite3_sys as ffi;

use crate::hydrate::LazyFile;

/// This VFS's name.
const NAME: &CStr = c"perceptron-lazy";

/// The default VFS, found at registration.
static REAL: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(std::ptr::null_mut());

/// The background fill's rate.
static FILL_RATE: AtomicU64 = AtomicU64::new(64 << 20);

/// One open file of this VFS.
#[repr(C)]
struct Handle {
    /// SQLite's header: our methods.
    base: ffi::sqlite3_file,
    /// `Arc::into_raw` of the file's shared state.
    lazy: *const LazyFile,
    /// The default VFS's handle; it extends past this field to the default VFS's size.
    real: ffi::sqlite3_file,
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    // 2: no xFetch/xUnfetch, so SQLite never maps a file whose holes are not filled in yet.
    iVersion: 2,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

/// Registers the VFS as SQLite's default, once per process: from then on every connection
/// opens its files through it. `fill_bytes_per_second` limits each lazily restored file's
/// background fill.
///
/// # Errors
/// [`RegisterError`]: SQLite has no default VFS, or refuses the registration.
pub fn register(fill_bytes_per_second: u64) -> Result<(), RegisterError> {
    static REGISTERED: OnceLock<Result<(), RegisterError>> = OnceLock::new();
    FILL_RATE.store(fill_bytes_per_second.max(1), Ordering::Relaxed);
    *REGISTERED.get_or_init(register_once)
}

/// Why the VFS could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegisterError {
    /// SQLite has no default VFS to wrap.
    NoDefault,
    /// The default VFS's `szOsFile` leaves no room for ours.
    FileSize(c_int),
    /// `sqlite3_vfs_register` returned this code.
    Refused(c_int),
}

impl std::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoDefault => f.write_str("SQLite has no default VFS"),
            Self::FileSize(size) => write!(f, "bad szOsFile ({size})"),
            Self::Refused(rc) => write!(f, "sqlite3_vfs_register: {rc}"),
        }
    }
}

impl std::error::Error for RegisterError {}

fn register_once() -> Result<(), RegisterError> {
    // SAFETY: sqlite3_vfs_find may be called at any time (it initialises SQLite if needed);
    // a null name asks for the default VFS.
    let real = unsafe { ffi::sqlite3_vfs_find(null()) };
    if real.is_null() {
        return Err(RegisterError::NoDefault);
    }
    // SAFETY: a registered VFS lives as long as the process (SQLite never frees it), and we
    // only copy its fields.
    let mut vfs = unsafe { *real };
    let bad_size = RegisterError::FileSize(vfs.szOsFile);
    let real_size = usize::try_from(vfs.szOsFile).map_err(|_| bad_size)?;
    vfs.szOsFile = c_int::try_from(offset_of!(Handle, real) + real_size).map_err(|_| bad_size)?;
    vfs.zName = NAME.as_ptr();
    vfs.pNext = std::ptr::null_mut();
    vfs.xOpen = Some(x_open);
    // The other methods stay the default VFS's: they use only `pAppData` and `mxPathname`,
    // copied unchanged.
    REAL.store(real, Ordering::Release);
    let ours = Box::into_raw(Box::new(vfs));
    // SAFETY: `ours` is leaked, so it outlives every connection, as SQLite requires.
    let rc = unsafe { ffi::sqlite3_vfs_register(ours, 1) };
    if rc == ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(RegisterError::Refused(rc))
    }
}

fn start_fill(lazy: &Arc<LazyFile>) {
    let lazy = Arc::clone(lazy);
    let rate = FILL_RATE.load(Ordering::Relaxed);
    let spawned = std::thread::Builder::new()
        .name("lazy-fill".into())
        .spawn(move || {
            tracing::info!(file = %lazy.path().display(), "filling in a lazily restored database in the background");
            lazy.fill_all(rate, |e| {
                tracing::warn!(file = %lazy.path().display(), error = %e, "background fill; retrying");
            });
            if lazy.progress().whole {
                tracing::info!(file = %lazy.path().display(), "lazily restored database is whole: an ordinary file again");
            }
        });
    if let Err(e) = spawned {
        // Reads still fetch what they need; only the background fill is missing.
        tracing::warn!(error = %e, "cannot start the background fill");
    }
}

unsafe extern "C" fn x_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let real = REAL.load(Ordering::Acquire);
    // SAFETY: `real` was set before this VFS was registered, and VFSes are never freed.
    let Some(real_open) = (unsafe { (*real).xOpen }) else {
        return ffi::SQLITE_CANTOPEN;
    };
    let lazy = if name.is_null() || flags & ffi::SQLITE_OPEN_MAIN_DB == 0 {
        None
    } else {
        // SAFETY: SQLite passes a NUL-terminated path that lives while the file is open.
        let name = unsafe { CStr::from_ptr(name) };
        match catch_unwind(|| lazy_state(name)) {
            Ok(Ok(lazy)) => lazy,
            Ok(Err(())) | Err(_) => return ffi::SQLITE_CANTOPEN,
        }
    };
    let Some(lazy) = lazy else {
        // An ordinary file: the default VFS's handle is the whole handle.
        // SAFETY: SQLite gave us `szOsFile` bytes, more than the default VFS needs.
        return unsafe { real_open(real, name, file, flags, out_flags) };
    };
    let handle = file.cast::<Handle>();
    // SAFETY: `file` has room for a Handle's header fields (szOsFile counts them).
    let real_file = unsafe { addr_of_mut!((*handle).real) };
    // SAFETY: the default VFS opens its own handle, in the bytes reserved for it.
    let rc = unsafe { real_open(real, name, real_file, flags, out_flags) };
    if rc != ffi::SQLITE_OK {
        // SAFETY: as above; a null pMethods tells SQLite not to call xClose.
        unsafe { (*handle).base.pMethods = null() };
        return rc;
    }
    // SAFETY: as above.
    unsafe { (*handle).lazy = Arc::into_raw(lazy) };
    // SAFETY: as above; METHODS is static.
    unsafe { (*handle).base.pMethods = &raw const METHODS };
    ffi::SQLITE_OK
}

/// The shared state of the database at `name` if it is restored lazily.
fn lazy_state(name: &CStr) -> Result<Option<Arc<LazyFile>>, ()> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
    LazyFile::open(path, start_fill).map_err(|e| {
        tracing::error!(file = %path.display(), error = %e, "cannot open a lazily restored database");
    })
}

/// The default VFS's handle inside ours, and its methods.
///
/// # Safety
/// `file` is a handle [`x_open`] gave [`METHODS`] to, not yet closed.
unsafe fn real_of(
    file: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    let handle = file.cast::<Handle>();
    // SAFETY: the caller's promise: `file` is a Handle.
    let real = unsafe { addr_of_mut!((*handle).real) };
    // SAFETY: the default VFS's handle, opened successfully.
    let methods = unsafe { (*real).pMethods };
    // SAFETY: its open succeeded, so pMethods points to the default VFS's static methods.
    let methods = unsafe { &*methods };
    (real, methods)
}

/// The shared state of an open handle.
///
/// # Safety
/// As [`real_of`]; the reference is used only before [`x_close`] returns.
unsafe fn lazy_of<'a>(file: *mut ffi::sqlite3_file) -> &'a LazyFile {
    let handle = file.cast::<Handle>();
    // SAFETY: the caller's promise: `file` is a Handle.
    let lazy = unsafe { (*handle).lazy };
    // SAFETY: `lazy` was set from Arc::into_raw at open and is released only at close.
    unsafe { &*lazy }
}

/// Runs the lazy part of a method: `Err` (or a panic) becomes `code`, logged with the file.
fn guarded(
    lazy: &LazyFile,
    code: c_int,
    what: impl FnOnce() -> Result<(), crate::hydrate::HydrateError>,
) -> Result<(), c_int> {
    match catch_unwind(AssertUnwindSafe(what)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            tracing::error!(file = %lazy.path().display(), error = %e, "cannot bring a lazily restored database's data in from the store");
            Err(code)
        }
        Err(_) => Err(code),
    }
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes only handles it opened through x_open with METHODS.
    let (real, m) = unsafe { real_of(file) };
    let rc = match m.xClose {
        // SAFETY: the default VFS's own method on its own handle.
        Some(close) => unsafe { close(real) },
        None => ffi::SQLITE_OK,
    };
    let handle = file.cast::<Handle>();
    // SAFETY: SQLite's handle, as above.
    let lazy = unsafe { (*handle).lazy };
    // SAFETY: the pointer Arc::into_raw gave at open, turned back once: SQLite calls nothing
    // on a handle after xClose.
    drop(unsafe { Arc::from_raw(lazy) });
    rc
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: an open handle of ours.
    let lazy = unsafe { lazy_of(file) };
    let (Ok(at), Ok(len)) = (u64::try_from(offset), u64::try_from(amt)) else {
        return ffi::SQLITE_IOERR_READ;
    };
    if let Err(code) = guarded(lazy, ffi::SQLITE_IOERR_READ, || lazy.ensure(at, len, false)) {
        return code;
    }
    // SAFETY: an open handle of ours.
    let (real, m) = unsafe { real_of(file) };
    match m.xRead {
        // SAFETY: the default VFS's own method, with SQLite's own buffer.
        Some(read) => unsafe { read(real, buf, amt, offset) },
        None => ffi::SQLITE_IOERR_READ,
    }
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: an open handle of ours.
    let lazy = unsafe { lazy_of(file) };
    let (Ok(at), Ok(len)) = (u64::try_from(offset), u64::try_from(amt)) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    if let Err(code) = guarded(lazy, ffi::SQLITE_IOERR_WRITE, || lazy.ensure(at, len, true)) {
        return code;
    }
    // SAFETY: an open handle of ours.
    let (real, m) = unsafe { real_of(file) };
    match m.xWrite {
        // SAFETY: the default VFS's own method, with SQLite's own buffer.
        Some(write) => unsafe { write(real, buf, amt, offset) },
        None => ffi::SQLITE_IOERR_WRITE,
    }
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: an open handle of ours.
    let lazy = unsafe { lazy_of(file) };
    let Ok(len) = u64::try_from(size) else {
        return ffi::SQLITE_IOERR_TRUNCATE;
    };
    if let Err(code) = guarded(lazy, ffi::SQLITE_IOERR_TRUNCATE, || lazy.truncating(len)) {
        return code;
    }
    // SAFETY: an open handle of ours.
    let (real, m) = unsafe { real_of(file) };
    let rc = match m.xTruncate {
        // SAFETY: the default VFS's own method.
        Some(truncate) => unsafe { truncate(real, size) },
        None => ffi::SQLITE_IOERR_TRUNCATE,
    };
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match guarded(lazy, ffi::SQLITE_IOERR_TRUNCATE, || lazy.truncated(len)) {
        Ok(()) => ffi::SQLITE_OK,
        Err(code) => code,
    }
}

/// A method passed straight to the default VFS's handle.
macro_rules! forward {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*), $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: an open handle of ours.
            let (real, m) = unsafe { real_of(file) };
            match m.$field {
                // SAFETY: the default VFS's own method on its own handle, with SQLite's
                // arguments unchanged.
                Some(f) => unsafe { f(real $(, $arg)*) },
                None => $missing,
            }
        }
    };
}

forward!(x_sync, xSync, (flags: c_int), ffi::SQLITE_IOERR_FSYNC);
forward!(x_file_size, xFileSize, (size: *mut i64), ffi::SQLITE_IOERR_FSTAT);
forward!(x_lock, xLock, (level: c_int), ffi::SQLITE_IOERR_LOCK);
forward!(x_unlock, xUnlock, (level: c_int), ffi::SQLITE_IOERR_UNLOCK);
forward!(x_check_reserved_lock, xCheckReservedLock, (out: *mut c_int), ffi::SQLITE_IOERR_CHECKRESERVEDLOCK);
forward!(x_file_control, xFileControl, (op: c_int, arg: *mut c_void), ffi::SQLITE_NOTFOUND);
forward!(x_sector_size, xSectorSize, (), 4096);
forward!(x_device_characteristics, xDeviceCharacteristics, (), 0);
forward!(x_shm_map, xShmMap, (region: c_int, size: c_int, extend: c_int, out: *mut *mut c_void), ffi::SQLITE_IOERR_SHMMAP);
forward!(x_shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int), ffi::SQLITE_IOERR_SHMLOCK);
forward!(x_shm_unmap, xShmUnmap, (delete: c_int), ffi::SQLITE_OK);

unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: an open handle of ours.
    let (real, m) = unsafe { real_of(file) };
    if let Some(barrier) = m.xShmBarrier {
        // SAFETY: the default VFS's own method on its own handle.
        unsafe { barrier(real) }
    }
}
