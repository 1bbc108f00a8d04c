//! The one way divgpu opens what it writes: relative to the descriptor of
//! the folder that holds it (`openat`, `O_NOFOLLOW`), never by resolving a
//! path and opening it again. A `Folder` is an open folder; every file of an
//! output (the temporary, the rename onto the target, the lock, the
//! checkpoint's files) is opened, made, renamed, linked or removed through
//! one, by a name of one component. Links inside the name are never
//! followed here: `safe_write::resolve` follows an output's link itself,
//! where the kernel would (`kernel_follows`).

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// An open folder (`O_DIRECTORY`), with the path it was opened by (for
/// messages only: nothing is opened by that path again).
#[derive(Debug)]
pub struct Folder {
    fd: OwnedFd,
    path: PathBuf,
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The metadata of one entry (`fstat`/`fstatat`).
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    pub mode: u32,
    pub uid: u32,
    pub dev: u64,
    pub ino: u64,
    pub ctime: i64,
}

impl Stat {
    fn from(st: &libc::stat) -> Stat {
        Stat { mode: st.st_mode, uid: st.st_uid, dev: st.st_dev, ino: st.st_ino, ctime: st.st_ctime }
    }
    pub fn is_link(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }
    pub fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    /// What an entry that is not a regular file is, for a refusal.
    pub fn kind(&self) -> &'static str {
        match self.mode & libc::S_IFMT {
            libc::S_IFDIR => "a folder",
            libc::S_IFIFO => "a FIFO (named pipe)",
            libc::S_IFCHR | libc::S_IFBLK => "a device node",
            libc::S_IFSOCK => "a socket",
            libc::S_IFLNK => "a symbolic link",
            _ => "not a regular file",
        }
    }
    pub fn same_file(&self, other: &Stat) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// `fstat` of an open file.
pub fn stat_of(fd: RawFd) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is written by a successful call before it is read.
    check(unsafe { libc::fstat(fd, st.as_mut_ptr()) })?;
    Ok(Stat::from(unsafe { &st.assume_init() }))
}

/// The effective user, whose files divgpu trusts.
pub fn me() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// A user's name (`getpwuid_r`), else "uid N".
pub fn user_name(uid: u32) -> String {
    let mut pw = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0 as libc::c_char; 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `found` is non-null only where `pw` was filled.
    let rc = unsafe { libc::getpwuid_r(uid, pw.as_mut_ptr(), buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc == 0 && !found.is_null() {
        // SAFETY: filled by a successful call; pw_name points into `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr((*found).pw_name) };
        return format!("{} (uid {uid})", name.to_string_lossy());
    }
    format!("uid {uid}")
}

impl Folder {
    /// Opens the folder at `path` (the kernel follows the links of the path,
    /// with its own rules).
    pub fn open(path: &Path) -> io::Result<Folder> {
        let c = c_name(path.as_os_str())?;
        // SAFETY: a valid NUL-terminated path.
        let fd = check(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) })?;
        // SAFETY: a descriptor just opened, owned from here.
        Ok(Folder { fd: unsafe { OwnedFd::from_raw_fd(fd) }, path: path.to_path_buf() })
    }

    /// The folder `rel` (a relative path, the kernel following its links)
    /// below this one; `nofollow`: `rel` is one name and may not be a link.
    pub fn open_at(&self, rel: &Path, nofollow: bool) -> io::Result<Folder> {
        let c = c_name(rel.as_os_str())?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | if nofollow { libc::O_NOFOLLOW } else { 0 };
        // SAFETY: a valid descriptor and NUL-terminated name.
        let fd = check(unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags) })?;
        // SAFETY: a descriptor just opened, owned from here.
        Ok(Folder { fd: unsafe { OwnedFd::from_raw_fd(fd) }, path: self.path.join(rel) })
    }

    /// The path it was opened by, with the links of its last hops as written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the folder really is (`/proc/self/fd`), else the path it was opened by.
    pub fn real_path(&self) -> PathBuf {
        std::fs::read_link(format!("/proc/self/fd/{}", self.fd.as_raw_fd())).unwrap_or_else(|_| self.path.clone())
    }

    pub fn stat(&self) -> io::Result<Stat> {
        stat_of(self.fd.as_raw_fd())
    }

    /// An entry's metadata, links not followed; None where there is none.
    pub fn stat_at(&self, name: &OsStr) -> io::Result<Option<Stat>> {
        let c = c_name(name)?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: valid descriptor, name and buffer.
        let rc = unsafe { libc::fstatat(self.fd.as_raw_fd(), c.as_ptr(), st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::NotFound { Ok(None) } else { Err(e) };
        }
        // SAFETY: written by the successful call.
        Ok(Some(Stat::from(unsafe { &st.assume_init() })))
    }

    /// Opens the entry `name` (never through a link: `O_NOFOLLOW`).
    pub fn open_file(&self, name: &OsStr, flags: libc::c_int, mode: u32) -> io::Result<File> {
        let c = c_name(name)?;
        let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY;
        // SAFETY: valid descriptor and name.
        let fd = check(unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags, mode as libc::c_uint) })?;
        // SAFETY: a descriptor just opened, owned from here.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// A new file `name`, read-write; an existing entry (a planted link too) is an error.
    pub fn create_new(&self, name: &OsStr, mode: u32) -> io::Result<File> {
        self.open_file(name, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, mode)
    }

    /// Renames `from` onto `to`, both in this folder (`to` is replaced, a link at `to` itself).
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        self.rename_to(from, self, to)
    }

    /// Renames `from` (here) onto `to` in `dest`.
    pub fn rename_to(&self, from: &OsStr, dest: &Folder, to: &OsStr) -> io::Result<()> {
        let (a, b) = (c_name(from)?, c_name(to)?);
        // SAFETY: valid descriptors and names.
        check(unsafe { libc::renameat(self.fd.as_raw_fd(), a.as_ptr(), dest.fd.as_raw_fd(), b.as_ptr()) }).map(|_| ())
    }

    /// Links `from` to the new name `to` (both here); an existing `to` is an error.
    pub fn link(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        let (a, b) = (c_name(from)?, c_name(to)?);
        // SAFETY: valid descriptors and names.
        check(unsafe { libc::linkat(self.fd.as_raw_fd(), a.as_ptr(), self.fd.as_raw_fd(), b.as_ptr(), 0) }).map(|_| ())
    }

    pub fn unlink(&self, name: &OsStr) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: valid descriptor and name.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }).map(|_| ())
    }

    pub fn remove_dir(&self, name: &OsStr) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: valid descriptor and name.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) }).map(|_| ())
    }

    pub fn make_dir(&self, name: &OsStr, mode: u32) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: valid descriptor and name.
        check(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) }).map(|_| ())
    }

    /// What the link `name` holds.
    pub fn read_link(&self, name: &OsStr) -> io::Result<PathBuf> {
        let c = c_name(name)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        // SAFETY: valid descriptor, name and buffer of the length given.
        let n = unsafe { libc::readlinkat(self.fd.as_raw_fd(), c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(PathBuf::from(OsString::from_vec(buf)))
    }

    /// Syncs the folder (its renames survive a crash); a file system that
    /// cannot sync a folder (EINVAL) has nothing to sync.
    pub fn sync(&self) -> io::Result<()> {
        // SAFETY: a valid descriptor.
        match check(unsafe { libc::fsync(self.fd.as_raw_fd()) }) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
            r => r.map(|_| ()),
        }
    }

    /// The names in the folder (not `.` and `..`).
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        // SAFETY: dup of a valid descriptor; fdopendir owns the duplicate (closedir closes it).
        let dup = check(unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) })?;
        let dir = unsafe { libc::fdopendir(dup) };
        if dir.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: not owned by a DIR.
            unsafe { libc::close(dup) };
            return Err(e);
        }
        // SAFETY: a fresh stream, read from the start.
        unsafe { libc::rewinddir(dir) };
        let mut names = Vec::new();
        loop {
            // SAFETY: a valid stream; the entry is read before the next call.
            let entry = unsafe { libc::readdir(dir) };
            if entry.is_null() {
                break;
            }
            // SAFETY: d_name is NUL-terminated.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name.to_vec()));
            }
        }
        // SAFETY: the stream opened above.
        unsafe { libc::closedir(dir) };
        Ok(names)
    }

    /// Whether the kernel's rule for links (fs.protected_symlinks) lets the
    /// caller follow a link of `link_owner` in this folder: anywhere but in a
    /// sticky world-writable folder, and there only a link of the caller or
    /// of the folder's owner.
    pub fn kernel_follows(&self, link_owner: u32) -> io::Result<bool> {
        let st = self.stat()?;
        let sticky_open = st.mode & libc::S_ISVTX != 0 && st.mode & libc::S_IWOTH != 0;
        Ok(!sticky_open || link_owner == me() || link_owner == st.uid)
    }
}

impl AsRawFd for Folder {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// `flock(LOCK_EX | LOCK_NB)`: Some(true) taken, Some(false) held by another
/// open file, None where the file system cannot hold one.
pub fn try_flock(file: &File) -> Option<bool> {
    // SAFETY: a valid open descriptor.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Some(true);
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EWOULDBLOCK) => Some(false),
        _ => None,
    }
}
