//! The C ABI of MariaDB 10.11's plugin loader and authentication plugins, as `repr(C)` structs.
//!
//! Transcribed from `mysql/plugin.h`, `mysql/plugin_auth.h` and `mysql/plugin_auth_common.h`
//! (Debian's `libmariadbd-dev`); the build needs none of the headers because every struct
//! carries a compile-time size (and where it matters, offset) assertion against the values a C
//! compiler gives on x86_64 and aarch64 Linux. The loader itself checks
//! `_maria_sizeof_struct_st_plugin_` against its own `sizeof(struct st_maria_plugin)`.

use core::ffi::{c_char, c_int, c_uchar, c_uint, c_void};
use core::mem::{offset_of, size_of};

/// `MARIA_PLUGIN_INTERFACE_VERSION`: the loader refuses a library with another major version.
pub const MARIA_PLUGIN_INTERFACE_VERSION: c_int = 0x010f;
/// `MYSQL_AUTHENTICATION_PLUGIN`.
pub const MYSQL_AUTHENTICATION_PLUGIN: c_int = 7;
/// `MYSQL_AUTHENTICATION_INTERFACE_VERSION`.
pub const MYSQL_AUTHENTICATION_INTERFACE_VERSION: c_int = 0x0202;
/// `PLUGIN_LICENSE_BSD`: the loader knows only proprietary, GPL and BSD; BSD is the one that
/// describes a permissive license such as this project's Apache-2.0.
pub const PLUGIN_LICENSE_BSD: c_int = 2;
/// `MariaDB_PLUGIN_MATURITY_GAMMA`: the default `--plugin-maturity` of a release server
/// refuses anything below gamma.
pub const MARIADB_PLUGIN_MATURITY_GAMMA: c_uint = 4;

/// `CR_OK`: authentication succeeded.
pub const CR_OK: c_int = -1;
/// `CR_ERROR`: authentication failed; the server sends ER_ACCESS_DENIED_ERROR.
pub const CR_ERROR: c_int = 0;

/// `PASSWORD_USED_NO`: "(using password: NO)" in the access-denied message.
pub const PASSWORD_USED_NO: c_int = 0;
/// `PASSWORD_USED_YES`.
pub const PASSWORD_USED_YES: c_int = 1;

/// `PLUGIN_VAR_BOOL`.
pub const PLUGIN_VAR_BOOL: c_int = 0x0001;
/// `PLUGIN_VAR_STR`.
pub const PLUGIN_VAR_STR: c_int = 0x0005;
/// `PLUGIN_VAR_READONLY`: settable on the command line or in my.cnf only.
pub const PLUGIN_VAR_READONLY: c_int = 0x0200;
/// `PLUGIN_VAR_OPCMDARG`: `--perceptron-dual-require-relay` alone means ON.
pub const PLUGIN_VAR_OPCMDARG: c_int = 0x2000;
/// `PLUGIN_VAR_MEMALLOC`: the server owns (copies) the string's memory.
pub const PLUGIN_VAR_MEMALLOC: c_int = 0x8000;

/// `MYSQL_USERNAME_LENGTH`.
pub const MYSQL_USERNAME_LENGTH: usize = 512;

/// `struct st_maria_plugin`: one entry of `_maria_plugin_declarations_`.
#[repr(C)]
#[derive(Debug)]
pub struct StMariaPlugin {
    /// `MYSQL_AUTHENTICATION_PLUGIN`, or 0 in the terminating entry.
    pub plugin_type: c_int,
    /// The type-specific descriptor: a [`StMysqlAuth`].
    pub info: *mut c_void,
    /// The plugin's name (`perceptron_dual`): `IDENTIFIED VIA` and the variables' prefix.
    pub name: *const c_char,
    /// For `SHOW PLUGINS`.
    pub author: *const c_char,
    /// For `SHOW PLUGINS`.
    pub descr: *const c_char,
    /// `PLUGIN_LICENSE_*`.
    pub license: c_int,
    /// Called once when the plugin is loaded; non-zero refuses the load.
    pub init: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    /// Called once when the plugin is unloaded.
    pub deinit: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    /// `0xMMmm`, shown as `MM.mm`.
    pub version: c_uint,
    /// `SHOW STATUS` variables (none).
    pub status_vars: *mut c_void,
    /// NULL-terminated array of system variables.
    pub system_vars: *mut *mut c_void,
    /// Free-form version text.
    pub version_info: *const c_char,
    /// `MariaDB_PLUGIN_MATURITY_*`.
    pub maturity: c_uint,
}

/// `struct st_mysql_auth`: the authentication plugin descriptor.
#[repr(C)]
#[derive(Debug)]
pub struct StMysqlAuth {
    /// `MYSQL_AUTHENTICATION_INTERFACE_VERSION`.
    pub interface_version: c_int,
    /// The client plugin whose answer the server caches and hands over without a round trip.
    pub client_auth_plugin: *const c_char,
    /// Runs one login.
    pub authenticate_user:
        Option<unsafe extern "C" fn(*mut MysqlPluginVio, *mut MysqlServerAuthInfo) -> c_int>,
    /// `PASSWORD('...')` in `CREATE USER`, `ALTER USER`, `SET PASSWORD`.
    pub hash_password:
        Option<unsafe extern "C" fn(*const c_char, usize, *mut c_char, *mut usize) -> c_int>,
    /// Converts the stored text once; its output is what `authenticate_user` sees.
    pub preprocess_hash:
        Option<unsafe extern "C" fn(*const c_char, usize, *mut c_uchar, *mut usize) -> c_int>,
}

/// `MYSQL_PLUGIN_VIO`: how a plugin talks to the client during a login.
#[repr(C)]
#[derive(Debug)]
pub struct MysqlPluginVio {
    /// Points `*buf` at the next packet's payload (owned by the server) and returns its length,
    /// or -1 when the client is gone.
    pub read_packet: Option<unsafe extern "C" fn(*mut MysqlPluginVio, *mut *mut c_uchar) -> c_int>,
    /// Sends one packet; 0 on success. The first write of a restarted plugin becomes an
    /// AuthSwitchRequest naming `client_auth_plugin`.
    pub write_packet:
        Option<unsafe extern "C" fn(*mut MysqlPluginVio, *const c_uchar, c_int) -> c_int>,
    /// Connection details (unused).
    pub info: Option<unsafe extern "C" fn(*mut MysqlPluginVio, *mut c_void)>,
}

/// `MYSQL_SERVER_AUTH_INFO`.
#[repr(C)]
#[derive(Debug)]
pub struct MysqlServerAuthInfo {
    /// The user name the client sent; set once the login packet has been read.
    pub user_name: *const c_char,
    /// Its length.
    pub user_name_length: c_uint,
    /// The account's stored string after `preprocess_hash`.
    pub auth_string: *const c_char,
    /// Its length.
    pub auth_string_length: usize,
    /// The account the login authenticates as.
    pub authenticated_as: [c_char; MYSQL_USERNAME_LENGTH + 1],
    /// `@@external_user`.
    pub external_user: [c_char; MYSQL_USERNAME_LENGTH + 1],
    /// `PASSWORD_USED_*`, for the access-denied message.
    pub password_used: c_int,
    /// The client's host name or IP (for a relayed login, the relay's, or the client's with
    /// the PROXY protocol).
    pub host_or_ip: *const c_char,
    /// Its length.
    pub host_or_ip_length: c_uint,
    /// The connection's `THD`.
    pub thd: *mut c_void,
}

/// `LEX_CSTRING`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LexCString {
    /// The bytes (NUL-terminated by the server, not relied on).
    pub str: *const c_char,
    /// Their length.
    pub length: usize,
}

/// The start of the server's private `MPVIO_EXT` (`sql/sql_acl.cc`), of which the
/// `MYSQL_PLUGIN_VIO` an auth plugin receives is the first member; `auth_info` is the
/// `MYSQL_SERVER_AUTH_INFO` it receives alongside. The login's database is not part of the
/// plugin API, but architecture.md §3 binds it into the relay's MAC, so the plugin reads it from here —
/// only after checking that `info` sits exactly where this layout puts it (see `ffi`).
/// Stable from MariaDB 10.4 (multiple auth methods per account) through 11.x.
#[repr(C)]
#[derive(Debug)]
pub struct MpvioExtHead {
    /// The base class.
    pub vio: MysqlPluginVio,
    /// The info struct passed to `authenticate_user`.
    pub auth_info: MysqlServerAuthInfo,
    /// `const ACL_USER *acl_user`.
    pub acl_user: *const c_void,
    /// `plugin_ref plugin`.
    pub plugin: *const c_void,
    /// The database named in the login packet (or `COM_CHANGE_USER`).
    pub db: LexCString,
}

/// `MYSQL_PLUGIN_VAR_HEADER` followed by a global variable's value pointer and default, as
/// `DECLARE_MYSQL_SYSVAR_BASIC` lays them out.
#[repr(C)]
#[derive(Debug)]
pub struct SysVar<T> {
    /// `PLUGIN_VAR_*` type and options.
    pub flags: c_int,
    /// The name without the plugin prefix.
    pub name: *const c_char,
    /// For `--help`.
    pub comment: *const c_char,
    /// Validation (NULL: the server's default for the type).
    pub check: *const c_void,
    /// Assignment (NULL: the server writes `*value` itself).
    pub update: Option<UpdateFn>,
    /// Where the value lives.
    pub value: *mut T,
    /// The default.
    pub def_val: T,
}

/// `mysql_var_update_func`.
pub type UpdateFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void, *const c_void);

// Sizes and offsets a C compiler gives these structs on LP64 Linux. A mismatch is a build
// error, never a misread field at run time.
const _: () = assert!(size_of::<StMariaPlugin>() == 104);
const _: () = assert!(size_of::<StMysqlAuth>() == 40);
const _: () = assert!(size_of::<MysqlPluginVio>() == 24);
const _: () = assert!(size_of::<MysqlServerAuthInfo>() == 1088);
const _: () = assert!(offset_of!(MysqlServerAuthInfo, password_used) == 1060);
const _: () = assert!(offset_of!(MysqlServerAuthInfo, thd) == 1080);
const _: () = assert!(offset_of!(MpvioExtHead, auth_info) == 24);
const _: () = assert!(offset_of!(MpvioExtHead, db) == 1128);
const _: () = assert!(size_of::<SysVar<c_char>>() == 56);
const _: () = assert!(size_of::<SysVar<*mut c_char>>() == 56);
