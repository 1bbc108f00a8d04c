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

pub use crate::durable::output::{replace_in, write_atomically, write_together, Output};
pub use crate::durable::stream::{is_stream, stdout_file, stream_descriptor, stream_file, STDOUT};
pub use crate::durable::target::{check_files, install, resolve, sync_folder, Named, Target};
pub use crate::durable::temp::{fault, host_name, process_alive, remove_stale_temporaries, Temp, TEMP_PREFIX};

#[cfg(test)]
mod tests;
