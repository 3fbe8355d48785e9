//! The symbols `mariadbd` looks up in the library and the `extern "C"` functions it calls.
//!
//! This is the only module with `unsafe` code. Its rules:
//! - every entry point runs its body under `catch_unwind` — a panic crossing `extern "C"`
//!   would abort `mariadbd` — and turns a panic into a refusal (or an error return) with an
//!   error-log line;
//! - pointers from the server are read once, at the boundary, into owned Rust values; the
//!   decision itself ([`crate::decision`]) is safe code;
//! - the declarations and variables the server reads (and for variables, writes) live in
//!   `static mut`s, never behind references, only as raw pointers handed to the server.
#![allow(
    unsafe_code,
    reason = "the C ABI MariaDB loads plugins through; each block says why it is sound"
)]

use core::ffi::{c_char, c_int, c_uchar, c_void};
use core::ptr;
use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use authplugin::replay::{DEFAULT_CAPACITY, DEFAULT_WINDOW_MS};
use authplugin::ticket::DEFAULT_TTL_MS;
use authplugin::ticket_store::Tickets;
use authplugin::{ReplayGuard, SCRAMBLE_LEN, Scramble};
use zeroize::Zeroizing;

use crate::abi::{
    CR_ERROR, CR_OK, LexCString, MARIA_PLUGIN_INTERFACE_VERSION, MARIADB_PLUGIN_MATURITY_GAMMA,
    MYSQL_AUTHENTICATION_INTERFACE_VERSION, MYSQL_AUTHENTICATION_PLUGIN, MpvioExtHead,
    MysqlPluginVio, MysqlServerAuthInfo, PASSWORD_USED_NO, PASSWORD_USED_YES, PLUGIN_LICENSE_BSD,
    PLUGIN_VAR_BOOL, PLUGIN_VAR_MEMALLOC, PLUGIN_VAR_OPCMDARG, PLUGIN_VAR_READONLY, PLUGIN_VAR_STR,
    StMariaPlugin, StMysqlAuth, SysVar,
};
use crate::decision::{self, Attempt, Policy};
use crate::error_log::{self, Level, escape};
use crate::key_source::{self, KeySource};
use crate::stored_hash;

/// The longest database name the server hands over (`SAFE_NAME_LEN`, 197 bytes, rounded up).
/// A longer value means the layout is not the one this plugin knows.
const MAX_DATABASE_LEN: usize = 256;

// ---- What the loader reads -----------------------------------------------------------------

/// Checked by the loader against its own major version.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals, reason = "the loader looks this exact name up")]
pub static _maria_plugin_interface_version_: c_int = MARIA_PLUGIN_INTERFACE_VERSION;

/// Checked by the loader against its own `sizeof(struct st_maria_plugin)`.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals, reason = "the loader looks this exact name up")]
pub static _maria_sizeof_struct_st_plugin_: c_int = {
    let size = core::mem::size_of::<StMariaPlugin>();
    assert!(size <= i32::MAX as usize);
    size as c_int
};

/// One plugin, then the zeroed entry that ends the array.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals, reason = "the loader looks this exact name up")]
pub static mut _maria_plugin_declarations_: [StMariaPlugin; 2] = [
    StMariaPlugin {
        plugin_type: MYSQL_AUTHENTICATION_PLUGIN,
        info: (&raw mut AUTH_DESCRIPTOR).cast(),
        name: c"perceptron_dual".as_ptr(),
        author: c"Perceptron".as_ptr(),
        descr: c"Dual verification of logins relayed by a Perceptron relay; stock clients log in with mysql_native_password".as_ptr(),
        license: PLUGIN_LICENSE_BSD,
        init: Some(plugin_init),
        deinit: Some(plugin_deinit),
        version: 0x0100,
        status_vars: ptr::null_mut(),
        system_vars: (&raw mut SYSTEM_VARIABLES).cast(),
        version_info: c"1.0".as_ptr(),
        maturity: MARIADB_PLUGIN_MATURITY_GAMMA,
    },
    StMariaPlugin {
        plugin_type: 0,
        info: ptr::null_mut(),
        name: ptr::null(),
        author: ptr::null(),
        descr: ptr::null(),
        license: 0,
        init: None,
        deinit: None,
        version: 0,
        status_vars: ptr::null_mut(),
        system_vars: ptr::null_mut(),
        version_info: ptr::null(),
        maturity: 0,
    },
];

static mut AUTH_DESCRIPTOR: StMysqlAuth = StMysqlAuth {
    interface_version: MYSQL_AUTHENTICATION_INTERFACE_VERSION,
    // Stock clients answer this plugin's challenge natively; the relay recognises the switch
    // and answers it with the relayed-auth payload instead.
    client_auth_plugin: c"mysql_native_password".as_ptr(),
    authenticate_user: Some(authenticate_user),
    hash_password: Some(hash_password),
    preprocess_hash: Some(preprocess_hash),
};

// ---- System variables ----------------------------------------------------------------------

/// `perceptron_dual_key_file`: the server stores its (owned) copy of the path here before
/// `init`; read-only, so it never changes afterwards.
static KEY_FILE: AtomicPtr<c_char> = AtomicPtr::new(ptr::null_mut());

/// `perceptron_dual_ticket_key_file`: this server's resumption-ticket key ring (never the
/// relay's); set with `perceptron_dual_instance`, relayed sessions get tickets. Read-only.
static TICKET_KEY_FILE: AtomicPtr<c_char> = AtomicPtr::new(ptr::null_mut());

/// `perceptron_dual_instance`: the instance name tickets are bound to. Read-only.
static INSTANCE: AtomicPtr<c_char> = AtomicPtr::new(ptr::null_mut());

/// `perceptron_dual_require_relay`. Written by the server from the command line before `init`,
/// afterwards only through [`update_require_relay`]; read by every login.
static REQUIRE_RELAY: AtomicBool = AtomicBool::new(false);

static mut KEY_FILE_VAR: SysVar<*mut c_char> = SysVar {
    flags: PLUGIN_VAR_STR | PLUGIN_VAR_READONLY | PLUGIN_VAR_MEMALLOC,
    name: c"key_file".as_ptr(),
    comment: c"Perceptron key ring (one '<id> <64 hex>' per line, mode 0600) that relays sign relayed logins with".as_ptr(),
    check: ptr::null(),
    update: None,
    value: KEY_FILE.as_ptr(),
    def_val: ptr::null_mut(),
};

static mut TICKET_KEY_FILE_VAR: SysVar<*mut c_char> = SysVar {
    flags: PLUGIN_VAR_STR | PLUGIN_VAR_READONLY | PLUGIN_VAR_MEMALLOC,
    name: c"ticket_key_file".as_ptr(),
    comment: c"This server's resumption-ticket key ring (mode 0600; never the relay's): relayed sessions get tickets to be reattached after a stop; redeemed ids go to <file>.used".as_ptr(),
    check: ptr::null(),
    update: None,
    value: TICKET_KEY_FILE.as_ptr(),
    def_val: ptr::null_mut(),
};

static mut INSTANCE_VAR: SysVar<*mut c_char> = SysVar {
    flags: PLUGIN_VAR_STR | PLUGIN_VAR_READONLY | PLUGIN_VAR_MEMALLOC,
    name: c"instance".as_ptr(),
    comment: c"The instance name resumption tickets are bound to (the relay's instance name)"
        .as_ptr(),
    check: ptr::null(),
    update: None,
    value: INSTANCE.as_ptr(),
    def_val: ptr::null_mut(),
};

static mut REQUIRE_RELAY_VAR: SysVar<c_char> = SysVar {
    flags: PLUGIN_VAR_BOOL | PLUGIN_VAR_OPCMDARG,
    name: c"require_relay".as_ptr(),
    comment:
        c"Accept only logins relayed by a Perceptron relay; refuse stock clients' direct logins"
            .as_ptr(),
    check: ptr::null(),
    update: Some(update_require_relay),
    value: REQUIRE_RELAY.as_ptr().cast(),
    def_val: 0,
};

static mut SYSTEM_VARIABLES: [*mut c_void; 5] = [
    (&raw mut KEY_FILE_VAR).cast(),
    (&raw mut REQUIRE_RELAY_VAR).cast(),
    (&raw mut TICKET_KEY_FILE_VAR).cast(),
    (&raw mut INSTANCE_VAR).cast(),
    ptr::null_mut(),
];

/// `SET GLOBAL perceptron_dual_require_relay = ...`: stores the checked value atomically, so
/// logins on other threads read either the old or the new value.
unsafe extern "C" fn update_require_relay(
    _thd: *mut c_void,
    _var: *mut c_void,
    _var_ptr: *mut c_void,
    save: *const c_void,
) {
    if save.is_null() {
        return;
    }
    // SAFETY: for a PLUGIN_VAR_BOOL the server's check function stores a `my_bool` (one
    // `char`) at `save` and passes that pointer here; it is non-null (checked above) and
    // valid for the duration of the call.
    let on = unsafe { *save.cast::<c_char>() } != 0;
    REQUIRE_RELAY.store(on, Ordering::Relaxed);
}

// ---- Plugin state --------------------------------------------------------------------------

/// What `init` sets up and every login shares. Behind a lock that `deinit` clears, so an
/// `UNINSTALL SONAME` / `INSTALL SONAME` cycle starts from a fresh state even when the library
/// stays mapped.
#[derive(Debug)]
struct PluginState {
    keys: KeySource,
    /// Process-wide: logins on every connection thread share one window.
    replay: Mutex<ReplayGuard>,
    /// Resumption tickets, when `perceptron_dual_ticket_key_file` and `_instance` are set.
    tickets: Option<Tickets>,
}

static STATE: RwLock<Option<Arc<PluginState>>> = RwLock::new(None);

/// The server's handle of this plugin (`struct st_plugin_int *`, what `init` receives), which
/// a release server also stores in `MPVIO_EXT.plugin` for every login this plugin runs: the
/// layout check compares the two ([`login_database`]). Null while the plugin is not loaded.
static PLUGIN_HANDLE: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());

fn state() -> Option<Arc<PluginState>> {
    STATE.read().unwrap_or_else(PoisonError::into_inner).clone()
}

fn guarded<T>(what: &str, on_panic: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        error_log::write(
            Level::Error,
            &format!("internal error in {what}; the call fails safely"),
        );
        on_panic
    })
}

/// The value of a read-only string variable, if set and UTF-8.
fn string_var(var: &AtomicPtr<c_char>) -> Option<String> {
    let raw = var.load(Ordering::Relaxed);
    if raw.is_null() {
        return None;
    }
    // SAFETY: a non-null value of a PLUGIN_VAR_STR | PLUGIN_VAR_MEMALLOC variable is a
    // NUL-terminated string the server allocated and keeps until the plugin unloads.
    let value = unsafe { CStr::from_ptr(raw) };
    value
        .to_str()
        .ok()
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// Why the ticket store cannot be used (the plugin is then not loaded).
#[derive(Debug)]
enum TicketsError {
    /// One of the two ticket variables is set without the other.
    HalfSet,
    /// The ticket key file.
    KeyFile(authplugin::key_file::KeyFileError),
    /// The file of redeemed tickets.
    Used(String, std::io::Error),
}

impl std::fmt::Display for TicketsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::HalfSet => f.write_str(
                "perceptron_dual_ticket_key_file and perceptron_dual_instance go together",
            ),
            Self::KeyFile(e) => write!(f, "cannot use perceptron_dual_ticket_key_file: {e}"),
            Self::Used(path, e) => write!(f, "cannot use {path} for redeemed tickets: {e}"),
        }
    }
}

/// The ticket store, when both ticket variables are set; an error-log line says why not.
fn open_tickets() -> Result<Option<Tickets>, TicketsError> {
    let (key_file, instance) = (string_var(&TICKET_KEY_FILE), string_var(&INSTANCE));
    let (key_file, instance) = match (key_file, instance) {
        (None, None) => return Ok(None),
        (Some(k), Some(i)) => (k, i),
        _ => return Err(TicketsError::HalfSet),
    };
    let ring = authplugin::key_file::load(Path::new(&key_file)).map_err(TicketsError::KeyFile)?;
    let used = format!("{key_file}.used");
    let now_ms = now_ms();
    Tickets::open(ring, instance, DEFAULT_TTL_MS, Path::new(&used), now_ms)
        .map(Some)
        .map_err(|e| TicketsError::Used(used, e))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

unsafe extern "C" fn plugin_init(plugin: *mut c_void) -> c_int {
    guarded("init", 1, || {
        let Some(path) = string_var(&KEY_FILE) else {
            error_log::write(
                Level::Error,
                "perceptron_dual_key_file is not set (add loose-perceptron-dual-key-file=/path/to/key under [mariadbd]); the plugin is not loaded",
            );
            return 1;
        };
        let tickets = match open_tickets() {
            Ok(tickets) => tickets,
            Err(e) => {
                error_log::write(Level::Error, &format!("{e}; the plugin is not loaded"));
                return 1;
            }
        };
        match KeySource::load(Path::new(&path)) {
            Ok(keys) => {
                error_log::write(
                    Level::Note,
                    &format!(
                        "{}; perceptron_dual_require_relay={}{}",
                        key_source::describe(&keys.current(), keys.path()),
                        if REQUIRE_RELAY.load(Ordering::Relaxed) {
                            "ON"
                        } else {
                            "OFF"
                        },
                        if tickets.is_some() {
                            "; resumption tickets on"
                        } else {
                            ""
                        }
                    ),
                );
                let fresh = PluginState {
                    keys,
                    replay: Mutex::new(ReplayGuard::new(DEFAULT_WINDOW_MS, DEFAULT_CAPACITY)),
                    tickets,
                };
                *STATE.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(fresh));
                PLUGIN_HANDLE.store(plugin, Ordering::Relaxed);
                0
            }
            Err(e) => {
                error_log::write(
                    Level::Error,
                    &format!("cannot use perceptron_dual_key_file: {e}; the plugin is not loaded"),
                );
                1
            }
        }
    })
}

unsafe extern "C" fn plugin_deinit(_plugin: *mut c_void) -> c_int {
    guarded("deinit", 0, || {
        *STATE.write().unwrap_or_else(PoisonError::into_inner) = None;
        PLUGIN_HANDLE.store(ptr::null_mut(), Ordering::Relaxed);
        0
    })
}

// ---- Stored hashes -------------------------------------------------------------------------

unsafe extern "C" fn hash_password(
    password: *const c_char,
    password_length: usize,
    hash: *mut c_char,
    hash_length: *mut usize,
) -> c_int {
    guarded("hash_password", 1, || {
        if hash.is_null() || hash_length.is_null() || (password.is_null() && password_length > 0) {
            return 1;
        }
        let password = if password_length == 0 {
            Zeroizing::new(Vec::new())
        } else {
            // SAFETY: the server passes the password's bytes and their length (not
            // NUL-terminated); `password` is non-null when the length is non-zero (checked).
            Zeroizing::new(
                unsafe { core::slice::from_raw_parts(password.cast::<u8>(), password_length) }
                    .to_vec(),
            )
        };
        let text = stored_hash::hash_password(&password);
        // SAFETY: `hash_length` is non-null (checked) and points at the capacity of `hash`.
        let capacity = unsafe { *hash_length };
        if text.len() > capacity {
            return 1;
        }
        // SAFETY: `hash` is non-null (checked) and has room for `capacity >= text.len()` bytes;
        // the regions cannot overlap (`text` is ours).
        unsafe { ptr::copy_nonoverlapping(text.as_ptr(), hash.cast::<u8>(), text.len()) };
        // SAFETY: as above, `hash_length` is non-null and writable.
        unsafe { *hash_length = text.len() };
        0
    })
}

unsafe extern "C" fn preprocess_hash(
    hash: *const c_char,
    hash_length: usize,
    out: *mut c_uchar,
    out_length: *mut usize,
) -> c_int {
    guarded("preprocess_hash", 1, || {
        if out.is_null() || out_length.is_null() || (hash.is_null() && hash_length > 0) {
            return 1;
        }
        let stored = if hash_length == 0 {
            &[][..]
        } else {
            // SAFETY: the server passes the stored text and its length; non-null when the
            // length is non-zero (checked); it outlives this call.
            unsafe { core::slice::from_raw_parts(hash.cast::<u8>(), hash_length) }
        };
        let Ok(raw) = stored_hash::preprocess(stored) else {
            return 1;
        };
        // SAFETY: `out_length` is non-null (checked) and holds the capacity of `out`.
        let capacity = unsafe { *out_length };
        if raw.len() > capacity {
            return 1;
        }
        // SAFETY: `out` is non-null with room for `capacity >= raw.len()` bytes; no overlap.
        unsafe { ptr::copy_nonoverlapping(raw.as_ptr(), out, raw.len()) };
        // SAFETY: as above, `out_length` is non-null and writable.
        unsafe { *out_length = raw.len() };
        0
    })
}

// ---- Logins --------------------------------------------------------------------------------

unsafe extern "C" fn authenticate_user(
    vio: *mut MysqlPluginVio,
    info: *mut MysqlServerAuthInfo,
) -> c_int {
    guarded("authenticate_user", CR_ERROR, || {
        if vio.is_null() || info.is_null() {
            return CR_ERROR;
        }
        // SAFETY: the server passes its live login context: `vio` and `info` are valid,
        // exclusively ours for this call (one login per thread), and outlive it.
        unsafe { authenticate(vio, info) }
    })
}

/// One login: challenge, reply, decision.
///
/// # Safety
/// `vio` and `info` must be the non-null pointers the server passed `authenticate_user`.
unsafe fn authenticate(vio: *mut MysqlPluginVio, info: *mut MysqlServerAuthInfo) -> c_int {
    let Some(state) = state() else {
        error_log::write(Level::Error, "login refused: the plugin is not initialised");
        return CR_ERROR;
    };
    // The challenge: scramble B and the NUL that ends a native scramble on the wire. Written
    // before reading, which makes the server send it as an AuthSwitchRequest naming
    // mysql_native_password (or, for the first plugin of a login, inside the greeting).
    let challenge = Scramble::generate(&mut rand::rngs::OsRng);
    let mut packet = [0u8; SCRAMBLE_LEN + 1];
    if let Some(head) = packet.get_mut(..SCRAMBLE_LEN) {
        head.copy_from_slice(challenge.as_bytes());
    }
    // SAFETY: `vio` is valid (caller); this copies its callbacks (function pointers).
    let callbacks = unsafe { &*vio };
    let (Some(write), Some(read)) = (callbacks.write_packet, callbacks.read_packet) else {
        return CR_ERROR;
    };
    // SAFETY: the server's own callback with its own `vio`; `packet` is valid for its
    // length, which fits a c_int.
    if unsafe { write(vio, packet.as_ptr(), packet.len() as c_int) } != 0 {
        // The client is gone; the server logs the aborted connection itself.
        return CR_ERROR;
    }
    // SAFETY: `vio` is the server's (caller) and `read` its own callback.
    let Some(mut reply) = (unsafe { read_reply(vio, read) }) else {
        return CR_ERROR;
    };
    let ring = state.keys.current();
    // A relay first asks for proof that this server holds the key; its next reply is the
    // login itself.
    match decision::answer_hello(&reply, &challenge, &ring) {
        None => {}
        Some(Ok(proof)) => {
            // SAFETY: as the challenge's write above; `proof` is valid for its length (under
            // 64 bytes).
            if unsafe { write(vio, proof.as_ptr(), proof.len() as c_int) } != 0 {
                return CR_ERROR;
            }
            // SAFETY: as the first read.
            let Some(next) = (unsafe { read_reply(vio, read) }) else {
                return CR_ERROR;
            };
            reply = next;
        }
        Some(Err(refusal)) => {
            // SAFETY: `info` is valid (caller).
            let (user, _, host) = unsafe { account_of(info) };
            log_refusal(&refusal, &user, &host);
            return CR_ERROR;
        }
    }
    // The user name and stored hash are filled in by the first read of the login.
    // SAFETY: `info` is valid (caller); the user name and auth string are the server's
    // buffers of the lengths it states, alive for the whole login.
    let (user, stored, host) = unsafe { account_of(info) };
    // SAFETY: `vio` and `info` are the server's login context (caller).
    let database = unsafe { login_database(vio, info) };

    let now_ms = now_ms();
    let attempt = Attempt {
        challenge: &challenge,
        reply: &reply,
        user: &user,
        database: database.as_deref(),
        stored: &stored,
        now_ms,
    };
    let policy = Policy {
        require_relay: REQUIRE_RELAY.load(Ordering::Relaxed),
    };
    let used = if decision::using_password(&reply) {
        PASSWORD_USED_YES
    } else {
        PASSWORD_USED_NO
    };
    // SAFETY: `info` is valid and ours for this call (caller); a plain int field.
    unsafe { (*info).password_used = used };
    let issuer = state
        .tickets
        .as_ref()
        .map(|tickets| decision::TicketIssuer { tickets });
    match decision::decide(&attempt, policy, &ring, &state.replay, issuer) {
        Ok(accepted) => {
            if let Some(ticket) = accepted.ticket {
                // Sent before the server's OK. A ticket starts with its magic (`PCTK`), so
                // the server sends it as it is, as the next packet of the exchange.
                // SAFETY: as the challenge's write above; `ticket` is valid for its length
                // (under 1 KiB, so it fits a c_int).
                if unsafe { write(vio, ticket.as_ptr(), ticket.len() as c_int) } != 0 {
                    return CR_ERROR;
                }
            }
            CR_OK
        }
        Err(refusal) => {
            log_refusal(&refusal, &user, &host);
            CR_ERROR
        }
    }
}

fn log_refusal(refusal: &decision::Refusal, user: &[u8], host: &[u8]) {
    error_log::write(
        Level::Warning,
        &format!(
            "refused {} login for '{}'@'{}': {} [{}]",
            refusal.route.as_str(),
            escape(user),
            escape(host),
            refusal.detail,
            refusal.kind
        ),
    );
}

/// Reads the client's next packet and copies it out of the server's buffer.
///
/// # Safety
/// `vio` must be the server's plugin vio for the current login and `read` its callback.
unsafe fn read_reply(
    vio: *mut MysqlPluginVio,
    read: unsafe extern "C" fn(*mut MysqlPluginVio, *mut *mut c_uchar) -> c_int,
) -> Option<Zeroizing<Vec<u8>>> {
    let mut reply_ptr: *mut c_uchar = ptr::null_mut();
    // SAFETY: the server's callback with its own `vio` (caller); it points `reply_ptr` at its
    // packet buffer.
    let reply_len = unsafe { read(vio, &raw mut reply_ptr) };
    let reply_len = usize::try_from(reply_len).ok()?;
    Some(if reply_len == 0 || reply_ptr.is_null() {
        Zeroizing::new(Vec::new())
    } else {
        // SAFETY: `read_packet` returned `reply_len` bytes at `reply_ptr`, valid until the
        // next read; they are copied (and wiped when dropped) before anything else happens.
        Zeroizing::new(unsafe { core::slice::from_raw_parts(reply_ptr, reply_len) }.to_vec())
    })
}

/// Copies the user name, the preprocessed stored hash and the client host out of `info`.
///
/// # Safety
/// `info` must point at the server's `MYSQL_SERVER_AUTH_INFO` for the current login.
unsafe fn account_of(info: *const MysqlServerAuthInfo) -> (Vec<u8>, Zeroizing<Vec<u8>>, Vec<u8>) {
    // SAFETY: `info` is valid (caller); the pointer/length pairs describe server buffers.
    let i = unsafe { &*info };
    // SAFETY: each pair is a server buffer of the stated length, or null.
    let user = unsafe { bytes(i.user_name, i.user_name_length as usize) };
    // SAFETY: as above.
    let stored = Zeroizing::new(unsafe { bytes(i.auth_string, i.auth_string_length) });
    // SAFETY: as above.
    let host = unsafe { bytes(i.host_or_ip, i.host_or_ip_length as usize) };
    (user, stored, host)
}

/// The bytes at `p`, or none for a null pointer.
///
/// # Safety
/// A non-null `p` must be valid for `len` bytes.
unsafe fn bytes(p: *const c_char, len: usize) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: non-null and valid for `len` bytes (caller).
    unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
}

/// The database named in the login, read from the server's `MPVIO_EXT` (see
/// [`MpvioExtHead`]): `None` unless every member from `auth_info` to `db` sits where that
/// layout puts it and the value is plausible, so another server layout refuses relayed logins
/// instead of misreading. `info` must be at `auth_info`'s offset (the server passed both
/// pointers) and `plugin` must hold this plugin's own handle (the one `init` received): a
/// member added or removed between them moves one of the two, and with both in place
/// `acl_user` (the one pointer between them) and `db` (right after `plugin`) are too. A
/// server whose `plugin_ref` is not the handle itself (a debug build) is refused the same
/// way.
///
/// # Safety
/// `vio` and `info` must be the pointers the server passed `authenticate_user`.
unsafe fn login_database(
    vio: *const MysqlPluginVio,
    info: *const MysqlServerAuthInfo,
) -> Option<Vec<u8>> {
    let head = vio.cast::<MpvioExtHead>();
    // `&raw const` computes the field address without reading or creating a reference.
    // SAFETY: only the address of `auth_info` is computed, within the object when the layout
    // matches; it is compared, not dereferenced.
    let expected_info = unsafe { &raw const (*head).auth_info };
    if !ptr::eq(expected_info, info) {
        return None;
    }
    let handle = PLUGIN_HANDLE.load(Ordering::Relaxed);
    if handle.is_null() {
        return None;
    }
    // SAFETY: `info` is at the offset `MPVIO_EXT` gives it, so `vio` is the start of an
    // `MPVIO_EXT`, which every server this layout describes extends past `db`: the `plugin`
    // member is in bounds; only its address is computed here.
    let plugin_at = unsafe { &raw const (*head).plugin };
    // SAFETY: in bounds (above) and set by the server before it runs any auth plugin. Only
    // the pointer value is read and compared, never followed.
    let plugin: *const c_void = unsafe { ptr::read_unaligned(plugin_at) };
    if !ptr::eq(plugin, handle) {
        return None;
    }
    // SAFETY: `auth_info` and `plugin` are where the layout puts them (above), so `db`, the
    // member right after `plugin`, is in bounds; only its address is computed here.
    let db_at = unsafe { &raw const (*head).db };
    // SAFETY: `db_at` is in bounds (above) and the server initialised the member.
    let db: LexCString = unsafe { ptr::read_unaligned(db_at) };
    if db.length == 0 {
        return Some(Vec::new());
    }
    if db.str.is_null() || db.length > MAX_DATABASE_LEN {
        return None;
    }
    // SAFETY: a non-empty `db` holds the server's copy of the name, `length` bytes long and
    // alive for the whole login.
    Some(unsafe { bytes(db.str, db.length) })
}

#[cfg(test)]
#[allow(
    clippy::undocumented_unsafe_blocks,
    clippy::multiple_unsafe_ops_per_block,
    reason = "test scaffolding playing the server: every pointer is to a live local of the test"
)]
mod tests {
    //! Drives the entry points the way `mariadbd` does, with a fake login context laid out as
    //! the server's `MPVIO_EXT` (the real server is exercised by the integration tests).

    use super::*;
    use authplugin::compute_proof::Hello;
    use authplugin::payload::{self, Binding, LoginClaim};
    use authplugin::{AuthPlugin, KeyId, KeyRing, PerceptronKey, native_password};
    use std::cell::RefCell;
    use std::ffi::CString;

    struct FakeLogin {
        head: MpvioExtHead,
        sent: Vec<u8>,
        reply: Reply,
        held: Vec<u8>,
        _user: CString,
        _stored: Vec<u8>,
        _db: CString,
    }

    /// The client's side: the next packet it sends, given the last one the plugin wrote.
    type Reply = Box<dyn FnMut(&[u8]) -> Vec<u8>>;

    /// Stands in for the server's `st_plugin_int` of this plugin: `init` gets its address, and
    /// a well-laid-out login context carries the same address in `MPVIO_EXT.plugin`.
    static FAKE_HANDLE: u64 = 0;

    fn fake_handle() -> *const c_void {
        (&raw const FAKE_HANDLE).cast()
    }

    thread_local! {
        static CURRENT: RefCell<*mut FakeLogin> = const { RefCell::new(ptr::null_mut()) };
    }

    unsafe extern "C" fn fake_write(
        _vio: *mut MysqlPluginVio,
        p: *const c_uchar,
        n: c_int,
    ) -> c_int {
        let login = CURRENT.with(|c| *c.borrow());
        unsafe { (*login).sent = core::slice::from_raw_parts(p, n as usize).to_vec() };
        0
    }

    unsafe extern "C" fn fake_read(_vio: *mut MysqlPluginVio, buf: *mut *mut c_uchar) -> c_int {
        let login = CURRENT.with(|c| *c.borrow());
        unsafe {
            let sent = (*login).sent.clone();
            (*login).held = ((*login).reply)(&sent);
            *buf = (*login).held.as_mut_ptr();
            (*login).held.len() as c_int
        }
    }

    fn fake(user: &str, db: &str, password: &[u8], reply: Reply) -> Box<FakeLogin> {
        let user = CString::new(user).unwrap();
        let db = CString::new(db).unwrap();
        let stored =
            stored_hash::preprocess(stored_hash::hash_password(password).as_bytes()).unwrap();
        let mut info: MysqlServerAuthInfo = unsafe { core::mem::zeroed() };
        info.user_name = user.as_ptr();
        info.user_name_length = user.as_bytes().len() as u32;
        info.auth_string = stored.as_ptr().cast();
        info.auth_string_length = stored.len();
        let mut login = Box::new(FakeLogin {
            head: MpvioExtHead {
                vio: MysqlPluginVio {
                    read_packet: Some(fake_read),
                    write_packet: Some(fake_write),
                    info: None,
                },
                auth_info: info,
                acl_user: ptr::null(),
                plugin: fake_handle(),
                db: LexCString {
                    str: db.as_ptr(),
                    length: db.as_bytes().len(),
                },
            },
            sent: Vec::new(),
            reply,
            held: Vec::new(),
            _user: user,
            _stored: stored,
            _db: db,
        });
        CURRENT.with(|c| *c.borrow_mut() = &raw mut *login);
        login
    }

    fn run(login: &mut FakeLogin) -> c_int {
        let vio = &raw mut login.head.vio;
        let info = &raw mut login.head.auth_info;
        unsafe { authenticate_user(vio, info) }
    }

    fn key() -> PerceptronKey {
        PerceptronKey::new(
            KeyId::new("k1").unwrap(),
            authplugin::KeySecret::from_bytes([9; 32]),
        )
    }

    fn install_state() {
        let dir = std::env::temp_dir().join(format!("perceptron-dual-ffi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        if !path.exists() {
            authplugin::key_file::append(&path, &key()).unwrap();
        }
        let c = CString::new(path.to_str().unwrap()).unwrap();
        KEY_FILE.store(c.into_raw(), Ordering::Relaxed);
        assert_eq!(unsafe { plugin_init(fake_handle().cast_mut()) }, 0);
    }

    /// A stock client: a native answer to the challenge.
    fn native_reply(password: &'static [u8]) -> Reply {
        Box::new(move |sent: &[u8]| {
            native_password::token(password, &Scramble::from_auth_plugin_data(sent).unwrap())
        })
    }

    /// A relay: a Hello for the challenge, then (if the proof verifies) the payload.
    fn relayed_reply(user: &'static [u8], db: &'static [u8], password: &'static [u8]) -> Reply {
        let mut round: Option<(Hello, Scramble)> = None;
        Box::new(move |sent: &[u8]| {
            let Some((hello, b)) = round.take() else {
                let b = Scramble::from_auth_plugin_data(sent).unwrap();
                let hello = Hello::generate(key().id().clone(), &mut rand::rngs::OsRng);
                let bytes = hello.encode();
                round = Some((hello, b));
                return bytes;
            };
            let ring = KeyRing::new(vec![key()]).unwrap();
            assert!(
                hello.verify_proof(sent, &b, &ring).is_ok(),
                "the plugin proves the key"
            );
            let b = &b;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64;
            let a = Scramble::generate_timed(&mut rand::rngs::OsRng, now);
            let claim = LoginClaim {
                scramble_a: a.clone(),
                answer_a: Zeroizing::new(native_password::token(password, &a)),
                client_plugin: AuthPlugin::MysqlNativePassword,
                client_addr: "10.1.2.3:4000".into(),
            };
            payload::encode_signed(
                &claim,
                &key(),
                now,
                &Binding {
                    scramble_b: b,
                    user,
                    database: db,
                },
            )
            .unwrap()
        })
    }

    #[test]
    fn the_whole_login_through_the_c_entry_points() {
        install_state();
        // The challenge is a 20-byte scramble and a NUL.
        let mut login = fake("app", "shop", b"pw", relayed_reply(b"app", b"shop", b"pw"));
        assert_eq!(run(&mut login), CR_OK);
        assert_eq!(login.head.auth_info.password_used, PASSWORD_USED_YES);
        // The challenge was a 20-byte scramble and a NUL; the last write, the proof.
        assert!(login.sent.starts_with(b"PCPT"));
        assert_eq!(login.head.auth_info.password_used, PASSWORD_USED_YES);

        // The database is read from the server's login state and bound by the MAC.
        let mut login = fake("app", "shop", b"pw", relayed_reply(b"app", b"mysql", b"pw"));
        assert_eq!(run(&mut login), CR_ERROR);

        // A stock client answers natively.
        let mut login = fake("app", "", b"pw", native_reply(b"pw"));
        assert_eq!(run(&mut login), CR_OK);
        REQUIRE_RELAY.store(true, Ordering::Relaxed);
        let mut login = fake("app", "", b"pw", native_reply(b"pw"));
        assert_eq!(run(&mut login), CR_ERROR);
        REQUIRE_RELAY.store(false, Ordering::Relaxed);

        // A context that is not laid out as MPVIO_EXT: relayed logins are refused.
        let mut login = fake("app", "shop", b"pw", relayed_reply(b"app", b"shop", b"pw"));
        let vio = &raw mut login.head.vio;
        let mut elsewhere: MysqlServerAuthInfo =
            unsafe { ptr::read(&raw const login.head.auth_info) };
        assert_eq!(
            unsafe { authenticate_user(vio, &raw mut elsewhere) },
            CR_ERROR
        );

        // A server whose MPVIO_EXT has one more member between `auth_info` and `db` (or one
        // less): `auth_info` is in place but `plugin` and `db` are not. Here `plugin` holds
        // what the member before it would (`acl_user`), and `db` what would be `plugin`:
        // relayed logins are refused instead of binding a misread database, native ones work.
        let mut login = fake("app", "shop", b"pw", relayed_reply(b"app", b"shop", b"pw"));
        let acl_user = CString::new("acl").unwrap();
        login.head.acl_user = acl_user.as_ptr().cast();
        login.head.plugin = login.head.acl_user;
        assert_eq!(run(&mut login), CR_ERROR, "plugin member not this plugin's");
        let mut login = fake("app", "", b"pw", native_reply(b"pw"));
        login.head.plugin = ptr::null();
        assert_eq!(run(&mut login), CR_OK, "a native login reads no database");
        let mut login = fake("app", "shop", b"pw", relayed_reply(b"app", b"shop", b"pw"));
        assert_eq!(run(&mut login), CR_OK, "the layout this plugin knows");

        assert_eq!(unsafe { plugin_deinit(ptr::null_mut()) }, 0);
        let mut login = fake("app", "shop", b"pw", relayed_reply(b"app", b"shop", b"pw"));
        assert_eq!(run(&mut login), CR_ERROR, "no state after deinit");
    }

    #[test]
    fn hash_entry_points_respect_buffer_sizes() {
        let mut buf = [0 as c_char; 64];
        let mut len = buf.len();
        let pw = b"password";
        assert_eq!(
            unsafe { hash_password(pw.as_ptr().cast(), pw.len(), buf.as_mut_ptr(), &raw mut len) },
            0
        );
        let text: Vec<u8> = buf[..len].iter().map(|&c| c as u8).collect();
        assert_eq!(&text[..41], b"*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19");
        assert_eq!(text.len(), 41 + 1 + 16, "the hash, '$' and the generation");
        let mut small = 57usize;
        assert_eq!(
            unsafe {
                hash_password(
                    pw.as_ptr().cast(),
                    pw.len(),
                    buf.as_mut_ptr(),
                    &raw mut small,
                )
            },
            1
        );

        let mut out = [0u8; 64];
        let mut out_len = out.len();
        assert_eq!(
            unsafe {
                preprocess_hash(
                    text.as_ptr().cast(),
                    text.len(),
                    out.as_mut_ptr(),
                    &raw mut out_len,
                )
            },
            0
        );
        assert_eq!(out_len, 20 + 8, "the hash and the generation");
        let bad = b"*nothex";
        let mut out_len = out.len();
        assert_eq!(
            unsafe {
                preprocess_hash(
                    bad.as_ptr().cast(),
                    bad.len(),
                    out.as_mut_ptr(),
                    &raw mut out_len,
                )
            },
            1
        );
        assert_eq!(
            unsafe { hash_password(ptr::null(), 0, buf.as_mut_ptr(), &raw mut len) },
            0
        );
        assert_eq!(len, 1 + 16, "an empty password: '$' and the generation");
    }

    #[test]
    fn exported_sizes_match_the_loader() {
        assert_eq!(_maria_sizeof_struct_st_plugin_, 104);
        assert_eq!(_maria_plugin_interface_version_, 0x010f);
    }
}
