//! `LuaPending` (`pending`): device objects being made on a thread of their
//! own (`ctx:begin_pipeline`, `ctx:begin_buffers`), so that a job's set-up
//! overlaps what would otherwise wait in line: on an H200 the driver took
//! 0.84 s to compile gram's step kernel and 1.48 s to allocate 64 GiB of G,
//! each while the host had other set-up to do (bench/RESULTS.md).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use mlua::{IntoLua, Lua, UserData, UserDataFields, Value};

use super::boundary::{methods_index, Methods};
use super::buffer::LuaBuffer;
use super::pipeline::LuaPipeline;
use crate::error::{Error, Result};
use crate::vk::buffer::Buffer;
use crate::vk::pipeline::Pipeline;

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

pub struct LuaPending {
    what: String,
    state: Option<State>,
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
        Ok(LuaPending { what, state: Some(State::Running(thread)) })
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
