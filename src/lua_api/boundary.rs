//! The Lua API's one error rule, kept at the boundary. Misuse raises: a
//! wrong argument, an unknown name, a value out of its range, a call out of
//! order (`Error::Usage`, and mlua's own conversion errors). Every other
//! failure, one that depends on the files, the devices or the GPU, is
//! returned as `nil, message`. `boundary.lua` wraps every function and
//! method registered here, so that a raised error is one line at the
//! caller's position, without mlua's traceback.

use mlua::{AnyUserData, FromLuaMulti, Function, IntoLuaMulti, Lua, MultiValue, Table as LuaTable, UserData, UserDataFields, Value};

use crate::error::Error;

/// `r` under the rule: its values (`true` for a call that has none, so that
/// success and `nil, message` are told apart); `nil, message` for an
/// expected failure; a raised error for misuse.
pub fn settle<T: IntoLuaMulti>(lua: &Lua, r: mlua::Result<T>) -> mlua::Result<MultiValue> {
    match r {
        Ok(values) => {
            let values = values.into_lua_multi(lua)?;
            if values.is_empty() {
                return true.into_lua_multi(lua);
            }
            Ok(values)
        }
        Err(mlua::Error::ExternalError(e)) => match e.downcast_ref::<Error>() {
            Some(Error::Usage(_)) | None => Err(mlua::Error::ExternalError(e)),
            Some(failure) => (Value::Nil, failure.to_string()).into_lua_multi(lua),
        },
        Err(e) => Err(e),
    }
}

/// A function of the module under the rule.
pub fn function<A, R, F>(lua: &Lua, f: F) -> mlua::Result<Function>
where
    A: FromLuaMulti,
    R: IntoLuaMulti,
    F: Fn(&Lua, A) -> mlua::Result<R> + 'static,
{
    lua.create_function(move |lua, args: A| settle(lua, f(lua, args)))
}

/// The methods of one userdata type: functions taking the object first,
/// wrapped by `boundary.lua` and found through the type's `__index`
/// (`methods_index`); its fields stay mlua's.
pub struct Methods {
    pub table: LuaTable,
    type_name: &'static str,
}

impl Methods {
    pub fn new(lua: &Lua, type_name: &'static str) -> mlua::Result<Self> {
        Ok(Methods { table: lua.create_table()?, type_name })
    }

    fn object<T: UserData + 'static>(ud: &AnyUserData, type_name: &str) -> mlua::Result<mlua::UserDataRef<T>> {
        ud.borrow::<T>().map_err(|_| Self::not_a(type_name))
    }

    /// boundary.lua puts the method's name (`ctx:buffer`) in front.
    fn not_a(type_name: &str) -> mlua::Error {
        Error::Usage(format!("called on something else than a {type_name}")).into()
    }

    /// `obj:name(args)`.
    pub fn add<T, A, R, F>(&self, lua: &Lua, name: &'static str, f: F) -> mlua::Result<()>
    where
        T: UserData + 'static,
        A: FromLuaMulti,
        R: IntoLuaMulti,
        F: Fn(&Lua, &T, A) -> mlua::Result<R> + 'static,
    {
        let type_name = self.type_name;
        let g = function(lua, move |lua, (ud, args): (AnyUserData, A)| f(lua, &*Self::object::<T>(&ud, type_name)?, args))?;
        self.table.set(name, g)
    }

    /// `obj:name(args)` on a mutable object.
    pub fn add_mut<T, A, R, F>(&self, lua: &Lua, name: &'static str, f: F) -> mlua::Result<()>
    where
        T: UserData + 'static,
        A: FromLuaMulti,
        R: IntoLuaMulti,
        F: Fn(&Lua, &mut T, A) -> mlua::Result<R> + 'static,
    {
        let type_name = self.type_name;
        let g = function(lua, move |lua, (ud, args): (AnyUserData, A)| {
            let mut this = ud.borrow_mut::<T>().map_err(|_| Self::not_a(type_name))?;
            f(lua, &mut this, args)
        })?;
        self.table.set(name, g)
    }
}

/// A static of this copy of the module: two copies loaded into one Lua
/// state (the shipped build and the fault-injection build, in a test) keep
/// their methods apart by its address.
static INSTANCE: u8 = 0;

/// Where a type's wrapped methods are kept (`mod.rs` puts them there).
pub fn registry_key(type_name: &str) -> String {
    format!("divgpu.methods.{type_name}@{:p}", &INSTANCE)
}

/// Makes the methods of `type_name` reachable as `obj:name(...)`.
pub fn methods_index<T, F: UserDataFields<T>>(f: &mut F, type_name: &'static str) {
    f.add_meta_field_with("__index", move |lua| lua.named_registry_value::<LuaTable>(&registry_key(type_name)));
}
