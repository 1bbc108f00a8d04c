//! An output's target (`Target`): resolved through its folder's descriptor,
//! a link followed only where the kernel would, refused where it is no
//! output (`resolve`); every output checked before any work
//! (`check_files`); a finished file installed onto it (`install`). The
//! module comment of `safe_write` says the whole path.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::durable::folder::{me, user_name, Folder, Stat};
use crate::error::{Error, Result};

use crate::durable::stream::{is_stream, stream_descriptor, stream_file, STDOUT};
use crate::durable::temp::{fault, Temp};

/// Symbolic links followed before giving up (Linux's own limit).
const MAX_LINKS: usize = 40;

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

/// Syncs a folder, so that a rename in it survives a crash.
pub fn sync_folder(dir: &Folder) -> Result<()> {
    dir.sync().map_err(|e| Error::io(dir.real_path().display().to_string(), e))
}

/// The mode a new file written over `target` gets: the replaced file's
/// exactly, else 0666 less the umask (applied by the creation).
pub(crate) fn kept_mode(target: &Target) -> Option<u32> {
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
