//! `LuaPending` (`pending`): device objects being made on a thread of their
//! own (`ctx:begin_pipeline`, `ctx:begin_buffers`), so that a job's set-up
//! overlaps what would otherwise wait in line: on an H200 the driver took
//! 1.14-1.36 s to compile gram's step kernel, while the host had the table
//! to prepare and upload and G to build (bench/RESULTS.md).

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mlua::{IntoLua, Lua, UserData, UserDataFields, Value};

use super::boundary::{methods_index, Methods};
use super::buffer::LuaBuffer;
use super::pipeline::LuaPipeline;
use crate::error::{Error, Result};
use crate::gpu::buffer::Buffer;
use crate::gpu::pipeline::Pipeline;

/// What a pending object makes.
#[derive(Clone)]
pub enum Made {
    Pipeline(Arc<Pipeline>),
    Buffers(Vec<Arc<Buffer>>),
}

enum State {
    Running(JoinHandle<(Result<Made>, f64)>),
    Finished(std::result::Result<Made, String>, f64),
}

/// The buffers a pending allocation has made so far, in order: a job may
/// use the first ones while the rest are still being allocated (gram builds
/// G's last rows while its first blocks are allocated).
#[derive(Default)]
pub struct Progress {
    made: Mutex<Vec<Arc<Buffer>>>,
    more: Condvar,
}

impl Progress {
    pub fn push(&self, buffer: Arc<Buffer>) {
        if let Ok(mut made) = self.made.lock() {
            made.push(buffer);
        }
        self.more.notify_all();
    }
}

pub struct LuaPending {
    what: String,
    state: Option<State>,
    progress: Option<Arc<Progress>>,
}

const TYPE: &str = "LuaPending";

impl LuaPending {
    /// Runs `make` on a new thread; `what` names it in errors.
    pub fn start(what: String, make: impl FnOnce() -> Result<Made> + Send + 'static) -> Result<LuaPending> {
        let thread = std::thread::Builder::new()
            .name("divgpu-setup".into())
            .spawn(move || {
                let t0 = Instant::now();
                let made = make();
                (made, t0.elapsed().as_secs_f64())
            })
            .map_err(|e| Error::Device(format!("{what}: could not start a thread: {e}")))?;
        Ok(LuaPending { what, state: Some(State::Running(thread)), progress: None })
    }

    /// As `start`, with `progress` filled by `make` as it goes.
    pub fn start_with_progress(
        what: String,
        progress: Arc<Progress>,
        make: impl FnOnce() -> Result<Made> + Send + 'static,
    ) -> Result<LuaPending> {
        let mut pending = LuaPending::start(what, make)?;
        pending.progress = Some(progress);
        Ok(pending)
    }

    /// The first `count` buffers, once made (waiting for them); the
    /// thread's error if it ended before making them.
    fn first(&mut self, count: usize) -> Result<Vec<Arc<Buffer>>> {
        let progress = self
            .progress
            .clone()
            .ok_or_else(|| Error::Usage(format!("{}: not a pending allocation of buffers", self.what)))?;
        loop {
            {
                let made = progress.made.lock().map_err(|_| Error::Device(format!("{}: poisoned", self.what)))?;
                if made.len() >= count {
                    return Ok(made[..count].to_vec());
                }
                if !self.is_done() {
                    // Woken by each buffer made; the timeout notices a thread that ended.
                    let _ = progress.more.wait_timeout(made, Duration::from_millis(50));
                    continue;
                }
            }
            let (made, _) = self.finish();
            return match made? {
                Made::Buffers(all) if all.len() >= count => Ok(all[..count].to_vec()),
                _ => Err(Error::Usage(format!("{}: asked for {count} buffers, it makes fewer", self.what))),
            };
        }
    }

    /// Waits for the thread (once); the result is kept for later calls. An
    /// error keeps its kind the first time (a refused interface still
    /// raises, out of memory is still `nil, err`), its words after.
    fn finish(&mut self) -> (Result<Made>, f64) {
        let (made, seconds) = match self.state.take() {
            Some(State::Running(thread)) => match thread.join() {
                Ok(r) => r,
                Err(_) => (Err(Error::Device(format!("{}: its thread panicked", self.what))), 0.0),
            },
            Some(State::Finished(made, s)) => (made.map_err(Error::Device), s),
            None => unreachable!("a pending object is running or finished"),
        };
        let kept = match &made {
            Ok(m) => Ok(m.clone()),
            Err(e) => Err(e.to_string()),
        };
        self.state = Some(State::Finished(kept, seconds));
        (made, seconds)
    }

    fn is_done(&self) -> bool {
        match &self.state {
            Some(State::Running(thread)) => thread.is_finished(),
            _ => true,
        }
    }
}

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    // pending:done() -> true once the thread has finished (without waiting).
    m.add(lua, "done", |_, this: &LuaPending, ()| Ok(this.is_done()))?;
    // pending:wait() -> what it made (a pipeline, or a list of buffers), and
    // the seconds its thread took.
    m.add_mut(lua, "wait", |lua, this: &mut LuaPending, ()| {
        let (made, seconds) = this.finish();
        let value: Value = match made? {
            Made::Pipeline(p) => LuaPipeline(p).into_lua(lua)?,
            Made::Buffers(list) => {
                let t = lua.create_table()?;
                for (i, b) in list.into_iter().enumerate() {
                    t.raw_set(i + 1, LuaBuffer(b))?;
                }
                Value::Table(t)
            }
        };
        Ok((value, seconds))
    })?;
    // pending:ready() -> how many of a pending allocation's buffers are made
    // so far (without waiting).
    m.add(lua, "ready", |_, this: &LuaPending, ()| {
        Ok(this.progress.as_ref().map(|p| p.made.lock().map(|m| m.len()).unwrap_or(0)).unwrap_or(0))
    })?;
    // pending:first(count) -> the first `count` buffers of a pending
    // allocation, waiting until they are made.
    m.add_mut(lua, "first", |lua, this: &mut LuaPending, count: usize| {
        let t = lua.create_table()?;
        for (i, b) in this.first(count)?.into_iter().enumerate() {
            t.raw_set(i + 1, LuaBuffer(b))?;
        }
        Ok(t)
    })?;
    Ok(m)
}

impl Drop for LuaPending {
    /// A pending object dropped unwaited (its job failed first) still waits
    /// for its thread: no driver call outlives the objects it works on.
    fn drop(&mut self) {
        if let Some(State::Running(thread)) = self.state.take() {
            let _ = thread.join();
        }
    }
}

impl UserData for LuaPending {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        methods_index(f, TYPE);
    }
}
