//! The one way divgpu writes a file. Every output of every command
//! (the cache, a part, a merge, a table, the FP16 files, a chart, the stats,
//! the checkpoint's state) goes through here, and every file is opened
//! relative to its folder's descriptor (`durable::folder`):
//!
//! - the target is resolved first (`resolve`): its folder opened, then a
//!   symbolic link at its name followed by divgpu itself, hop by hop, only
//!   where the kernel would follow it (never a link of another user in a
//!   sticky world-writable folder such as /tmp, unless the folder's owner
//!   made it: the rule of fs.protected_symlinks, applied whatever that
//!   setting is); the link stays and its target gets the bytes. A target
//!   that exists but is not a regular file (a folder, a FIFO, a device node,
//!   a socket) is refused, as are a lock's name (`*.lock`), anything inside
//!   a checkpoint folder (`OUT.checkpoint/`) and a folder that is missing or
//!   not writable: before any work, since the CLI checks every output with
//!   `check_files` first;
//! - `OUT.lock` is taken beside the target (`durable::lock`), the lock `run`
//!   holds: one writer per output, whatever the command;
//! - the bytes go to a temporary file created exclusively (`O_EXCL`,
//!   `O_NOFOLLOW`) under an unpredictable name in the target's folder,
//!   `.divgpu-tmp.HOST.PID.RANDOM`, `flock`ed while it lives;
//! - the file is synced, renamed onto the target (`renameat`, in the folder
//!   opened first), and the folder synced, so the target is the old file or
//!   the whole new one, even after a crash;
//! - a temporary left by a killed command (nobody holds its `flock`) is
//!   removed by the next command that writes in that folder.
//!
//! `-`, `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` and `/proc/PID/fd/N` (a
//! descriptor of this process) are streams: the bytes are written to the
//! descriptor as it was opened (appending where it appends), with no
//! temporary, rename or lock (`stream`).
//! `check_files` also refuses an output that is the same file as an input or
//! as another output (the same device and inode, or the same resolved path).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::durable::folder::{me, stat_of, try_flock, user_name, Folder, Stat};
use crate::durable::lock::Lock;
use crate::error::{Error, Result};

/// The name an output given as `-` has: standard output.
pub const STDOUT: &str = "-";
/// How every temporary file's name starts (then host, pid and random letters).
pub const TEMP_PREFIX: &str = ".divgpu-tmp.";
/// Symbolic links followed before giving up (Linux's own limit).
const MAX_LINKS: usize = 40;
/// A temporary nobody `flock`s is a killed command's; one younger than this
/// whose process this host still sees is spared (it may be between its
/// creation and its `flock`).
const YOUNG_SECONDS: i64 = 2;

/// Where an output's bytes go.
#[derive(Debug, Clone)]
pub struct Target {
    /// The path as given.
    pub given: String,
    /// The file written: its folder's real path and its name (for messages
    /// and comparisons; it is written through `dir`).
    pub file: PathBuf,
    /// Its folder's real path.
    pub folder: PathBuf,
    /// Whether `given` is a symbolic link (then `file` is its target).
    pub through_link: bool,
    /// The folder, open: every file of the output is opened through it.
    pub dir: Arc<Folder>,
    /// The file's name in `dir`.
    pub name: OsString,
}

impl Target {
    /// A file beside the target named like it plus `suffix` (`OUT.lock`,
    /// `OUT.checkpoint`), for messages: beside the given path, or beside the
    /// link's target when the output is a link (where the file renamed onto
    /// the target is, on its file system). It is opened as `sibling_name`
    /// in `dir`.
    pub fn sibling(&self, suffix: &str) -> PathBuf {
        if self.through_link {
            let mut name = self.file.clone().into_os_string();
            name.push(suffix);
            PathBuf::from(name)
        } else {
            PathBuf::from(format!("{}{suffix}", self.given))
        }
    }

    /// The name in `dir` of the file `sibling` describes.
    pub fn sibling_name(&self, suffix: &str) -> OsString {
        let mut name = self.name.clone();
        name.push(suffix);
        name
    }

    /// The given path, and the resolved one where a link was followed.
    pub fn describe(&self) -> String {
        if self.through_link {
            format!("{} (a link to {})", self.given, self.file.display())
        } else {
            self.given.clone()
        }
    }

    /// What is at the target now (a link not followed), if anything.
    pub fn existing(&self) -> Option<Stat> {
        self.dir.stat_at(&self.name).ok().flatten()
    }
}

/// A path's folder and last name ("." where it has no folder).
fn split(path: &Path) -> Option<(PathBuf, OsString)> {
    let name = path.file_name()?.to_owned();
    if name == OsStr::new("..") || name == OsStr::new(".") {
        return None;
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Some((parent, name))
}

/// Whether an open folder is a process's descriptor table (`/proc/PID/fd`),
/// whose entries are descriptors, not files.
fn is_descriptor_table(dir: &Folder) -> bool {
    let real = dir.real_path();
    let parts: Vec<&OsStr> = real.iter().collect();
    parts.first() == Some(&OsStr::new("/"))
        && parts.get(1) == Some(&OsStr::new("proc"))
        && parts.last() == Some(&OsStr::new("fd"))
}

/// The folder a path names, opened, or the one-line reason why not.
fn open_folder(path: &str, folder: &Path, from: Option<&Folder>) -> Result<Folder> {
    let opened = match from {
        Some(base) if folder.is_relative() => base.open_at(folder, false),
        _ => Folder::open(folder),
    };
    opened.map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::ENOENT) => format!("folder {} does not exist", folder.display()),
            Some(libc::ENOTDIR) => format!("{} is not a folder", folder.display()),
            Some(libc::EACCES) => format!("folder {} cannot be reached (permission denied)", folder.display()),
            Some(libc::ELOOP) => "too many levels of symbolic links".to_string(),
            _ => format!("folder {} cannot be opened ({e})", folder.display()),
        };
        Error::input(path, why)
    })
}

/// Resolves an output path (not a stream) and checks, before any work, that
/// it can be written the safe way (module comment).
pub fn resolve(path: &str) -> Result<Target> {
    if path.is_empty() {
        return Err(Error::input("''", "an empty path"));
    }
    if path.ends_with('/') {
        return Err(Error::input(path, "ends with '/': it names a folder, not a file"));
    }
    if stream_descriptor(path).is_some() {
        return Err(Error::input(path, "names a descriptor, which is written as a stream, not as a file"));
    }
    let not_a_file = || Error::input(path, "not a file path (it names a folder)");
    let (parent, mut name) = split(Path::new(path)).ok_or_else(not_a_file)?;
    let mut dir = open_folder(path, &parent, None)?;
    let mut through_link = false;
    for hop in 0..=MAX_LINKS {
        if is_descriptor_table(&dir) {
            return Err(Error::input(
                path,
                format!("leads to a descriptor ({}); give its own name (/dev/fd/N) or - for a stream", dir.real_path().join(&name).display()),
            ));
        }
        let st = match dir.stat_at(&name) {
            Ok(Some(st)) if st.is_link() => st,
            Ok(_) => break,
            Err(e) => return Err(Error::io(path, e)),
        };
        if hop == MAX_LINKS {
            return Err(Error::input(path, "too many levels of symbolic links"));
        }
        if !dir.kernel_follows(st.uid).map_err(|e| Error::io(path, e))? {
            return Err(Error::input(
                path,
                format!(
                    "a link of {} in the sticky world-writable folder {}: not followed (the kernel follows such a link \
                     only for its owner or the folder's: fs.protected_symlinks); write elsewhere, or remove the link",
                    user_name(st.uid),
                    dir.real_path().display()
                ),
            ));
        }
        let link = dir.read_link(&name).map_err(|e| Error::io(path, e))?;
        if let Some(Ok(_)) = stream_descriptor(&link.to_string_lossy()) {
            return Err(Error::input(
                path,
                format!("is a link to {}; give that name (or -) for a stream", link.display()),
            ));
        }
        let (lparent, lname) = split(&link).ok_or_else(not_a_file)?;
        dir = open_folder(path, &lparent, Some(&dir))?;
        name = lname;
        through_link = true;
    }
    let folder = dir.real_path();
    let target = Target { given: path.to_string(), file: folder.join(&name), folder, through_link, dir: Arc::new(dir), name };
    refuse_reserved(&target)?;
    if let Some(st) = target.existing() {
        if !st.is_file() {
            return Err(Error::input(
                target.describe(),
                format!("{}, not a regular file: divgpu writes only regular files (and never replaces anything else)", st.kind()),
            ));
        }
    }
    check_writable(&target)?;
    Ok(target)
}

/// A lock's name and the inside of a checkpoint folder are no outputs: they
/// belong to the run that holds them.
fn refuse_reserved(t: &Target) -> Result<()> {
    if t.name.as_bytes().ends_with(b".lock") {
        return Err(Error::input(
            t.describe(),
            "a lock's name (*.lock): divgpu never writes over a lock, whatever the command; name another file",
        ));
    }
    if t.folder.file_name().is_some_and(|f| f.as_bytes().ends_with(b".checkpoint")) {
        return Err(Error::input(
            t.describe(),
            format!(
                "lies inside the checkpoint folder {}, which only its run writes; name a file elsewhere",
                t.folder.display()
            ),
        ));
    }
    Ok(())
}

/// The folder accepts a new file and a rename (write and search permission,
/// for the effective user: root passes the mode bits, but not a read-only
/// file system), and an existing target in a sticky folder (/tmp) is ours.
fn check_writable(t: &Target) -> Result<()> {
    // SAFETY: a valid descriptor and a NUL-terminated name.
    let rc = unsafe { libc::faccessat(t.dir.as_raw_fd(), c".".as_ptr(), libc::W_OK | libc::X_OK, libc::AT_EACCESS) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        let why = match e.raw_os_error() {
            Some(libc::EROFS) => "is on a read-only file system".to_string(),
            Some(libc::EACCES) | Some(libc::EPERM) => "is not writable (permission denied)".to_string(),
            _ => format!("cannot be written ({e})"),
        };
        return Err(Error::input(t.describe(), format!("folder {} {why}", t.folder.display())));
    }
    let folder = t.dir.stat().map_err(|e| Error::io(t.folder.display().to_string(), e))?;
    if let Some(st) = t.existing() {
        let sticky = folder.mode & libc::S_ISVTX != 0;
        let me = me();
        if sticky && me != 0 && st.uid != me && folder.uid != me {
            return Err(Error::input(
                t.describe(),
                "belongs to another user in a sticky folder: it cannot be replaced (write elsewhere)",
            ));
        }
    }
    Ok(())
}

/// This machine's name, as temporaries and locks record it (characters other
/// than letters, digits, '-' and '_' become '_', so the name parses back).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = if rc == 0 { String::from_utf8_lossy(&buf[..len]).into_owned() } else { String::new() };
    let clean: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if clean.is_empty() { "unknown-host".into() } else { clean }
}

/// Whether process `pid` of this machine is alive (EPERM: it is, as another
/// user's). Seen from this pid namespace only: the fallback where `flock`
/// cannot tell.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The prefix of this process's temporary names.
fn temp_prefix() -> String {
    format!("{TEMP_PREFIX}{}.{}.", host_name(), std::process::id())
}

/// Ten random letters and digits (the kernel's generator).
fn random_letters() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 10];
    // SAFETY: the buffer is writable for its whole length.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        // No getrandom: the clock and a counter still make a name O_EXCL can retry.
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mix = t as u64 ^ COUNT.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed);
        bytes.iter_mut().enumerate().for_each(|(i, b)| *b = (mix >> (i * 6)) as u8);
    }
    bytes.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect()
}

/// A temporary file in a folder: `.divgpu-tmp.HOST.PID.RANDOM`, made with
/// `O_EXCL` (a planted name is never followed), `flock`ed while it lives so
/// that no other command takes it for a killed one's; removed when dropped
/// unless renamed onto its target (`commit_onto`).
pub struct Temp {
    dir: Arc<Folder>,
    name: OsString,
    file: File,
    kept: bool,
}

impl Temp {
    /// A new temporary in `dir`, of mode `mode` less the umask.
    pub fn create(dir: Arc<Folder>, mode: u32) -> std::io::Result<Temp> {
        let prefix = temp_prefix();
        let mut last = None;
        for _ in 0..100 {
            let name = OsString::from(format!("{prefix}{}", random_letters()));
            match dir.create_new(&name, mode) {
                Ok(file) => {
                    let _ = try_flock(&file);
                    return Ok(Temp { dir, name, file, kept: false });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }

    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// Its path, for messages and `tail -f`.
    pub fn path(&self) -> PathBuf {
        self.dir.real_path().join(&self.name)
    }

    /// Links it to `to` in its folder without replacing anything (false:
    /// `to` exists), then drops its own name; the file stays open.
    pub fn link_as(mut self, to: &OsStr) -> std::io::Result<Option<File>> {
        match self.dir.link(&self.name, to) {
            Ok(()) => {
                let _ = self.dir.unlink(&self.name);
                self.kept = true;
                let file = self.file.try_clone()?;
                Ok(Some(file))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Renames it onto `to` in `dest` (the commit), after syncing it.
    fn commit_onto(mut self, dest: &Folder, to: &OsStr) -> std::io::Result<()> {
        fault::at(fault::Step::Sync).and_then(|()| self.file.sync_all())?;
        fault::at(fault::Step::Rename).and_then(|()| self.dir.rename_to(&self.name, dest, to))?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        // Only our file: a name replaced meanwhile is left alone.
        let ours = stat_of(self.file.as_raw_fd()).ok();
        if let (Some(a), Ok(Some(b))) = (ours, self.dir.stat_at(&self.name)) {
            if a.same_file(&b) {
                let _ = self.dir.unlink(&self.name);
            }
        }
    }
}

/// Whether the folder entry `name` is a temporary of a killed command of
/// this host: nobody holds its `flock` (and, younger than two seconds, its
/// process is not one this pid namespace sees alive: it may be between its
/// creation and its `flock`). Another host's is left (its `flock` may not
/// reach here). Where `flock` cannot hold, the host and pid of its name
/// decide: a dead process of this host.
fn is_stale_temporary(dir: &Folder, name: &OsStr, host: &str) -> bool {
    let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else { return false };
    let mut fields = rest.rsplitn(3, '.');
    let (Some(_random), Some(pid), Some(owner)) = (fields.next(), fields.next(), fields.next()) else { return false };
    let pid = pid.parse::<u32>().ok();
    let dead_here = owner == host && pid.is_some_and(|p| !process_alive(p));
    let Ok(Some(st)) = dir.stat_at(name) else { return false };
    if !st.is_file() {
        return false;
    }
    let Ok(file) = dir.open_file(name, libc::O_RDONLY | libc::O_NONBLOCK, 0) else { return false };
    if !stat_of(file.as_raw_fd()).is_ok_and(|s| s.same_file(&st)) {
        return false;
    }
    match try_flock(&file) {
        Some(true) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
            owner == host && (dead_here || now - st.ctime >= YOUNG_SECONDS)
        }
        Some(false) => false,
        None => dead_here,
    }
}

/// Removes the temporaries that killed divgpu commands left in `dir`
/// (regular files only; a name that is anything else is left). Returns how
/// many were removed.
pub fn remove_stale_temporaries(dir: &Folder) -> usize {
    let host = host_name();
    let Ok(names) = dir.names() else { return 0 };
    names.iter().filter(|n| is_stale_temporary(dir, n, &host) && dir.unlink(n).is_ok()).count()
}

/// Syncs a folder, so that a rename in it survives a crash.
pub fn sync_folder(dir: &Folder) -> Result<()> {
    dir.sync().map_err(|e| Error::io(dir.real_path().display().to_string(), e))
}

/// The mode a new file written over `target` gets: the replaced file's
/// exactly, else 0666 less the umask (applied by the creation).
fn kept_mode(target: &Target) -> Option<u32> {
    target.existing().filter(Stat::is_file).map(|st| st.mode & 0o7777)
}

/// Syncs `file` (named `from` in `from_dir`), gives it the replaced file's
/// mode, renames it onto the target, syncs the folder: the commit of the
/// checkpoint's finished cache.
pub fn install(file: &File, from_dir: &Folder, from: &OsStr, target: &Target) -> Result<()> {
    let shown = from_dir.real_path().join(from);
    let failed = |step: &str, e: std::io::Error| {
        Error::input(target.describe(), format!("{step} failed ({e}); the old file is kept, {} is removed", shown.display()))
    };
    if let Some(mode) = kept_mode(target) {
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode)).map_err(|e| failed("chmod", e))?;
    }
    fault::at(fault::Step::Sync).and_then(|()| file.sync_all()).map_err(|e| failed("sync", e))?;
    fault::at(fault::Step::Rename).and_then(|()| from_dir.rename_to(from, &target.dir, &target.name)).map_err(|e| failed("rename", e))?;
    sync_folder(&target.dir)
}

/// The descriptor a stream's path names: `-` and `/dev/stdout` 1,
/// `/dev/stderr` 2, `/dev/fd/N`, `/proc/self/fd/N`, `/proc/thread-self/fd/N`
/// and `/proc/PID/fd/N` N (PID this process, or another one whose
/// descriptor N is this process's N: the same open file, inherited). None:
/// the path is not a stream; Err: it names a descriptor divgpu cannot write.
pub fn stream_descriptor(path: &str) -> Option<std::result::Result<i32, String>> {
    let number = |s: &str| s.parse::<i32>().ok().filter(|n| *n >= 0 && s.bytes().all(|b| b.is_ascii_digit()));
    match path {
        STDOUT | "/dev/stdout" => return Some(Ok(1)),
        "/dev/stderr" => return Some(Ok(2)),
        "/dev/stdin" => return Some(Err("standard input is not an output".into())),
        _ => {}
    }
    let rest = path.strip_prefix("/dev/fd/").or_else(|| path.strip_prefix("/proc/self/fd/")).or_else(|| path.strip_prefix("/proc/thread-self/fd/"));
    if let Some(n) = rest {
        return Some(number(n).ok_or_else(|| "not a descriptor number".to_string()));
    }
    let (pid, n) = path.strip_prefix("/proc/")?.split_once("/fd/")?;
    let (pid, n) = (number(pid)?, number(n)?);
    if pid as u32 == std::process::id() {
        return Some(Ok(n));
    }
    // Another process's descriptor: written only where it is ours too.
    let theirs = std::fs::metadata(path).ok();
    let ours = stat_of(n).ok();
    match (theirs, ours) {
        (Some(t), Some(o)) if t.dev() == o.dev && t.ino() == o.ino => Some(Ok(n)),
        _ => Some(Err(format!(
            "descriptor {n} of process {pid}, which this process does not share; give -, or a descriptor this command inherits"
        ))),
    }
}

/// Whether `path` is written as a stream (`-` or a descriptor's name).
pub fn is_stream(path: &str) -> bool {
    stream_descriptor(path).is_some()
}

/// The stream `path` names (`is_stream`), as a `File`: a duplicate of the
/// descriptor, open for writing (checked), written where it stands (its
/// own offset, or the end where it was opened to append).
pub fn stream_file(path: &str) -> Result<File> {
    let shown = if path == STDOUT { "standard output".to_string() } else { path.to_string() };
    let fd = match stream_descriptor(path) {
        Some(Ok(fd)) => fd,
        Some(Err(why)) => return Err(Error::input(shown, why)),
        None => return Err(Error::input(shown, "not a stream")),
    };
    if fd == 1 {
        std::io::stdout().flush().map_err(|e| Error::io(&shown, e))?;
    }
    // SAFETY: F_GETFL on any number: EBADF where it is not open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(Error::input(shown, format!("descriptor {fd} is not open")));
    }
    if flags & libc::O_ACCMODE == libc::O_RDONLY {
        return Err(Error::input(shown, format!("descriptor {fd} is open for reading only")));
    }
    // SAFETY: a descriptor just checked open; the duplicate is owned by the File.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(Error::io(shown, std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just made, owned from here.
    Ok(unsafe { File::from_raw_fd(dup) })
}

/// Standard output as a `File` (a duplicate of descriptor 1).
pub fn stdout_file() -> Result<File> {
    stream_file(STDOUT)
}

/// Faults of the commit for the tests: with the cargo feature
/// `fault-injection` (build/fault/divgpu.so, never shipped),
/// `divgpu.inject_write_fault(kind)` makes the next commit's sync
/// ("write-sync": EIO) or rename ("write-rename": ENOSPC) fail, as a failing
/// disk would; without the feature `at` is always Ok and compiles away.
pub mod fault {
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub enum Step {
        Sync = 1,
        Rename = 2,
    }

    #[cfg(feature = "fault-injection")]
    static ARMED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

    /// Arms one fault (replacing any armed one); it fires once.
    #[cfg(feature = "fault-injection")]
    pub fn arm(kind: &str) -> crate::error::Result<()> {
        let step = match kind {
            "write-sync" => Step::Sync as u8,
            "write-rename" => Step::Rename as u8,
            "none" => 0,
            other => {
                return Err(crate::error::Error::Usage(format!(
                    "inject_write_fault: unknown fault '{other}' (write-sync, write-rename or none)"
                )))
            }
        };
        ARMED.store(step, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Err (once) where the fault armed is `step`'s.
    #[inline]
    pub fn at(step: Step) -> std::io::Result<()> {
        #[cfg(feature = "fault-injection")]
        {
            use std::sync::atomic::Ordering::SeqCst;
            if ARMED.compare_exchange(step as u8, 0, SeqCst, SeqCst).is_ok() {
                let errno = if step == Step::Sync { libc::EIO } else { libc::ENOSPC };
                return Err(std::io::Error::from_raw_os_error(errno));
            }
        }
        let _ = step;
        Ok(())
    }
}

/// Where an output's bytes go while it is written.
enum Sink {
    /// A temporary beside the target, renamed onto it by `commit`, the
    /// output's lock held until then.
    File { target: Target, temp: Temp, _lock: Option<Lock> },
    /// A stream (`-`, a descriptor), written where it stands.
    Stream { given: String },
}

/// An output being written: a temporary file beside its target, renamed onto
/// it by `commit`, or a stream; dropped without a commit, the temporary is
/// removed (and the lock released).
pub struct Output {
    sink: Sink,
    file: File,
}

impl Output {
    /// Resolves and checks `path`, takes its lock (`OUT.lock`, as `run`
    /// does: refused while another command writes it), removes stale
    /// temporaries in its folder, and creates the temporary (mode: the
    /// replaced file's, else 0666 less the umask). A stream is opened as
    /// one (`stream_file`).
    pub fn create(path: &str) -> Result<Output> {
        Output::create_locked(path, true)
    }

    /// `create`; `lock`: false where the caller holds the output's lock already.
    pub fn create_locked(path: &str, lock: bool) -> Result<Output> {
        if is_stream(path) {
            let file = stream_file(path)?;
            return Ok(Output { sink: Sink::Stream { given: path.to_string() }, file });
        }
        let target = resolve(path)?;
        let lock = if lock { Some(take_lock(&target)?) } else { None };
        remove_stale_temporaries(&target.dir);
        let mode = kept_mode(&target);
        let temp = Temp::create(target.dir.clone(), mode.unwrap_or(0o666)).map_err(|e| {
            Error::input(target.describe(), format!("cannot create a temporary file in {}: {e}", target.folder.display()))
        })?;
        if let Some(mode) = mode {
            // An existing file keeps its mode exactly (creation applied the umask).
            let _ = temp.file().set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode));
        }
        let file = temp.file().try_clone().map_err(|e| Error::io(target.describe(), e))?;
        Ok(Output { sink: Sink::File { target, temp, _lock: lock }, file })
    }

    /// The output's names: as given, and for messages (`describe`).
    pub fn target(&self) -> OutputName {
        OutputName { given: self.given().to_string(), described: self.describe() }
    }

    /// The path as given.
    pub fn given(&self) -> &str {
        match &self.sink {
            Sink::File { target, .. } => &target.given,
            Sink::Stream { given } => given,
        }
    }

    /// The output for messages (the link's target too, where it is a link).
    pub fn describe(&self) -> String {
        match &self.sink {
            Sink::File { target, .. } => target.describe(),
            Sink::Stream { given } if given == STDOUT => "standard output".into(),
            Sink::Stream { given } => given.clone(),
        }
    }

    /// Where the bytes are while it is written: the temporary file's path
    /// (the stats are streamed there: `tail -f` it), or the stream's.
    pub fn temp_path(&self) -> PathBuf {
        match &self.sink {
            Sink::File { temp, .. } => temp.path(),
            Sink::Stream { given } => PathBuf::from(given),
        }
    }

    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Synced, renamed onto the target, the folder synced (a stream: flushed).
    pub fn commit(self) -> Result<()> {
        let Output { sink, mut file } = self;
        match sink {
            Sink::Stream { given } => file.flush().map_err(|e| Error::input(given, format!("write failed: {e}"))),
            Sink::File { target, temp, _lock } => {
                let shown = temp.path();
                temp.commit_onto(&target.dir, &target.name).map_err(|e| {
                    let step = if e.raw_os_error() == Some(libc::EIO) { "sync" } else { "rename" };
                    Error::input(
                        target.describe(),
                        format!("{step} failed ({e}); the old file is kept, {} is removed", shown.display()),
                    )
                })?;
                sync_folder(&target.dir)
            }
        }
    }
}

/// An output's names (`Output::target`): the path as given, and as messages
/// name it (a link's target too; "standard output" for `-`).
pub struct OutputName {
    pub given: String,
    described: String,
}

impl OutputName {
    pub fn describe(&self) -> String {
        self.described.clone()
    }
}

/// The output's lock, `OUT.lock` beside it; a stale one taken over says so.
fn take_lock(target: &Target) -> Result<Lock> {
    let (lock, taken) = Lock::acquire_for(target, false, |_| {})?;
    if let Some(note) = crate::durable::lock::note(lock.path(), &taken) {
        eprintln!("divgpu: {note}");
    }
    Ok(lock)
}

/// A failed write's message; a crate error raised by the writer (merge: a part
/// found bad while it is copied) is passed on as it is.
fn write_error(path: &str, e: Box<dyn std::error::Error>) -> Error {
    match e.downcast::<Error>() {
        Ok(e) => *e,
        Err(e) => Error::input(path, format!("write failed: {e}")),
    }
}

/// Writes `path` the safe way (module comment): all of it or nothing; the
/// old file stays as it was on any error. A stream is written to.
pub fn write_atomically(
    path: &str,
    write: impl FnOnce(&mut BufWriter<File>) -> std::result::Result<(), Box<dyn std::error::Error>>,
) -> Result<()> {
    write_together(&[path], |w| write(&mut w[0]))
}

/// Writes several outputs as one (a table and its sidecar): every one
/// resolved, locked and given its temporary before a byte is written, then
/// all written (`write` gets a writer per path, in order), then committed in
/// order. One that cannot be made (a sidecar's name taken by a folder) or
/// written leaves every file as it was: no partial output.
pub fn write_together(
    paths: &[&str],
    write: impl FnOnce(&mut [BufWriter<File>]) -> std::result::Result<(), Box<dyn std::error::Error>>,
) -> Result<()> {
    let mut outs = paths.iter().map(|p| Output::create(p)).collect::<Result<Vec<Output>>>()?;
    let mut writers = Vec::with_capacity(outs.len());
    for out in &mut outs {
        let shown = out.describe();
        writers.push(BufWriter::new(out.file().try_clone().map_err(|e| Error::io(&shown, e))?));
    }
    let first = outs.first().map(Output::describe).unwrap_or_default();
    write(&mut writers).map_err(|e| write_error(&first, e))?;
    for (w, out) in writers.iter_mut().zip(&outs) {
        w.flush().map_err(|e| Error::input(out.describe(), format!("write failed: {e}")))?;
    }
    drop(writers);
    outs.into_iter().try_for_each(Output::commit)
}

/// Replaces `name` in `dir` whole (a temporary renamed onto it, never a link
/// followed: a link at `name` is itself replaced): the checkpoint's own
/// files, under the lock its run holds.
pub fn replace_in(dir: &Arc<Folder>, name: &OsStr, bytes: &[u8]) -> Result<()> {
    let shown = dir.real_path().join(name).display().to_string();
    let mut temp = Temp::create(dir.clone(), 0o666).map_err(|e| Error::io(&shown, e))?;
    temp.file_mut().write_all(bytes).map_err(|e| Error::io(&shown, e))?;
    temp.commit_onto(dir, name).map_err(|e| Error::io(&shown, e))?;
    sync_folder(dir)
}

/// The proof, before any work, that the target's folder takes a file: a
/// temporary made and removed there.
fn probe(t: &Target) -> Result<()> {
    match Temp::create(t.dir.clone(), 0o600) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::input(
            t.describe(),
            format!("folder {} takes no new file ({e}); for standard output give -", t.folder.display()),
        )),
    }
}

/// A file's identity: device and inode.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// An output or input named on the command line: its option and path.
pub struct Named<'a> {
    pub option: &'a str,
    pub path: &'a str,
}

/// Checks, before any work, every output (`resolve`; a stream where
/// `stdout_ok`: its descriptor open for writing) and that no output is the
/// same file as an input or as another output. Errors are one line starting
/// with the option and path at fault.
pub fn check_files(outputs: &[Named], inputs: &[Named], stdout_ok: bool) -> Result<Vec<Option<Target>>> {
    let mut targets = Vec::with_capacity(outputs.len());
    for out in outputs {
        if is_stream(out.path) {
            if !stdout_ok {
                let what = if out.path == STDOUT { "standard output" } else { "a descriptor (a stream)" };
                return Err(Error::Refused(format!(
                    "{} {}: {what} is not an output of this command; name a file",
                    out.option, out.path
                )));
            }
            drop(stream_file(out.path).map_err(|e| Error::Refused(format!("{} {e}", out.option)))?);
            targets.push(None);
            continue;
        }
        let named = |e: Error| Error::Refused(format!("{} {e}", out.option));
        let t = resolve(out.path).map_err(named)?;
        probe(&t).map_err(named)?;
        let here = t.existing().map(|s| (s.dev, s.ino));
        let same = |path: &str| {
            let p = Path::new(path);
            std::fs::canonicalize(p).is_ok_and(|c| c == t.file) || (here.is_some() && identity(p) == here)
        };
        for input in inputs {
            if same(input.path) {
                return Err(Error::Refused(format!(
                    "{} {} is the same file as {} {}: divgpu never writes over its input",
                    out.option, out.path, input.option, input.path
                )));
            }
        }
        for (earlier, seen) in outputs.iter().zip(&targets) {
            let clash = |s: &Target| s.file == t.file || (here.is_some() && s.existing().map(|x| (x.dev, x.ino)) == here);
            if seen.as_ref().is_some_and(clash) {
                return Err(Error::Refused(format!(
                    "{} {} is the same file as {} {}: each output needs a file of its own",
                    out.option, out.path, earlier.option, earlier.path
                )));
            }
        }
        targets.push(Some(t));
    }
    Ok(targets)
}

#[cfg(test)]
mod tests;
