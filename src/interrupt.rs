//! SIGINT and SIGTERM as a flag that the driver polls between chunks of GPU
//! work (LuaJIT has no signal API). While catching, the first signal only sets
//! the flag, so the run stops at the next chunk boundary with its checkpoint
//! intact; a second one exits at once (status 128 + signal), losing at most
//! the batch in progress, as `kill -9` would, unless it comes within
//! `SAME_SIGNAL_MS` of the first: `timeout -s INT` (and a terminal's Ctrl-C
//! to a pipeline) signals the process and then its group, two signals
//! that are one request, so they count as one. When not catching, a signal has
//! its default effect (the process ends).
//!
//! The handlers (signal-hook) are installed once, on the first `catch`; they
//! only touch atomics, which is what a signal handler may do. They replace any
//! earlier handler rather than chaining to it: the `luajit` interpreter's own
//! SIGINT handler would otherwise raise "interrupted!" inside the driver (and
//! reset SIGINT to its default, so the next one would kill the process).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;

use crate::error::{Error, Result};

/// Not catching: a signal gets its default action.
static PASS: AtomicBool = AtomicBool::new(true);
/// A signal was caught: the next one exits at once.
static ARMED: AtomicBool = AtomicBool::new(false);
/// The caught signal's number, 0 if none.
static CAUGHT: AtomicUsize = AtomicUsize::new(0);
/// When the first signal came (CLOCK_MONOTONIC, ms).
static FIRST_AT_MS: AtomicU64 = AtomicU64::new(0);
/// A second signal this soon after the first is the same request.
const SAME_SIGNAL_MS: u64 = 1000;

/// CLOCK_MONOTONIC in milliseconds (clock_gettime is async-signal-safe).
fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// The handler's exit on a second signal: only atomics, the clock and _exit.
fn on_signal(sig: i32) {
    if PASS.load(SeqCst) {
        return;
    }
    let now = monotonic_ms();
    if !ARMED.load(SeqCst) {
        FIRST_AT_MS.store(now, SeqCst);
    } else if now.saturating_sub(FIRST_AT_MS.load(SeqCst)) >= SAME_SIGNAL_MS {
        signal_hook::low_level::exit(128 + sig);
    }
}
static INSTALLED: Mutex<bool> = Mutex::new(false);

fn install() -> Result<()> {
    let mut installed = INSTALLED.lock().map_err(|_| Error::Refused("signal handlers: lock poisoned".into()))?;
    if *installed {
        return Ok(());
    }
    let failed = |e: std::io::Error| Error::Refused(format!("cannot install the SIGINT/SIGTERM handlers: {e}"));
    for sig in [SIGINT, SIGTERM] {
        // SAFETY: sets the disposition to the default (no handler code is
        // involved); signal-hook then chains to nothing but the default.
        if unsafe { libc::signal(sig, libc::SIG_DFL) } == libc::SIG_ERR {
            return Err(failed(std::io::Error::last_os_error()));
        }
        // Run in the order registered: the default action when not catching,
        // the exit for a second signal, then the flags.
        flag::register_conditional_default(sig, &PASS).map_err(failed)?;
        // SAFETY: on_signal touches atomics, reads the clock and may _exit.
        unsafe { signal_hook::low_level::register(sig, move || on_signal(sig)) }.map_err(failed)?;
        flag::register_usize(sig, &CAUGHT, sig as usize).map_err(failed)?;
        flag::register(sig, &ARMED).map_err(failed)?;
    }
    *installed = true;
    Ok(())
}

/// Starts (`true`, clearing any earlier signal) or stops catching SIGINT and SIGTERM.
pub fn catch(on: bool) -> Result<()> {
    if on {
        install()?;
        CAUGHT.store(0, SeqCst);
        ARMED.store(false, SeqCst);
    }
    PASS.store(!on, SeqCst);
    Ok(())
}

/// The signal caught since `catch(true)`: "SIGINT", "SIGTERM" or None.
pub fn caught() -> Option<&'static str> {
    match CAUGHT.load(SeqCst) as i32 {
        0 => None,
        SIGINT => Some("SIGINT"),
        SIGTERM => Some("SIGTERM"),
        _ => Some("a signal"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_signal_sets_the_flag_and_does_not_end_the_process() {
        catch(true).unwrap();
        assert_eq!(caught(), None);
        signal_hook::low_level::raise(SIGINT).unwrap();
        assert_eq!(caught(), Some("SIGINT"));
        // A new catch forgets it (and disarms the exit on a second signal).
        catch(true).unwrap();
        assert_eq!(caught(), None);
        signal_hook::low_level::raise(SIGTERM).unwrap();
        assert_eq!(caught(), Some("SIGTERM"));
        catch(true).unwrap();
    }

    #[test]
    fn a_second_signal_within_the_interval_counts_as_one() {
        catch(true).unwrap();
        signal_hook::low_level::raise(SIGINT).unwrap();
        // Still running: the second came at once (a process and its group).
        signal_hook::low_level::raise(SIGINT).unwrap();
        assert_eq!(caught(), Some("SIGINT"));
        catch(true).unwrap();
    }
}
