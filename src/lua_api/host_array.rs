//! `LuaHostArray` (`array`): typed arrays in native memory (u32, u16, f32,
//! f64). Tables, starts, centroids and sequences move between files, the GPU
//! and the CPU mirror as these, never as flattened Lua tables. Lua sees a
//! 1-based array: `a[i]` (nil outside 1..#a, as a table), `a[i] = v`, `#a`.
//! Where a short list is natural (starts), a plain Lua table is taken too
//! (`U32s`).

use mlua::{AnyUserData, FromLua, Lua, MetaMethod, Table as LuaTable, UserData, UserDataFields, UserDataMethods, UserDataRef, Value};

use super::boundary::{function, registry_key, Methods};
use crate::error::Error;

#[derive(Debug, Clone, PartialEq)]
pub enum LuaHostArray {
    U32(Vec<u32>),
    U16(Vec<u16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// `len` zeroed values, or an error when the memory cannot be had: `vec![0; n]`
/// aborts the whole process on failure (`divgpu.array("f64", 1e12)`).
fn zeroed<T: bytemuck::Zeroable>(dtype: &str, len: usize) -> Result<Vec<T>, Error> {
    let too_big = || Error::OutOfMemory {
        what: format!(
            "an array of {len} {dtype} values ({:.3e} bytes) cannot be allocated",
            len as f64 * std::mem::size_of::<T>() as f64
        ),
        kind: "host",
    };
    if len == 0 || std::mem::size_of::<T>() == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<T>(len).map_err(|_| too_big())?;
    // SAFETY: `layout` has a non-zero size (len > 0, T not zero-sized); the
    // pointer comes from the global allocator with T's layout for `len`
    // values, all zero bytes, which is a valid T (`Zeroable`); the Vec takes
    // ownership with length = capacity = len, exactly as `vec![zero; len]` does.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if ptr.is_null() {
        return Err(too_big());
    }
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

impl LuaHostArray {
    /// An array of `len` zeros; out of host memory is an error, not an abort.
    pub fn new(dtype: &str, len: usize) -> mlua::Result<LuaHostArray> {
        Ok(match dtype {
            "u32" => LuaHostArray::U32(zeroed(dtype, len)?),
            "u16" => LuaHostArray::U16(zeroed(dtype, len)?),
            "f32" => LuaHostArray::F32(zeroed(dtype, len)?),
            "f64" => LuaHostArray::F64(zeroed(dtype, len)?),
            other => return Err(Error::Usage(format!("unknown dtype '{other}' (u32, u16, f32 or f64)")).into()),
        })
    }

    pub fn dtype(&self) -> &'static str {
        match self {
            LuaHostArray::U32(_) => "u32",
            LuaHostArray::U16(_) => "u16",
            LuaHostArray::F32(_) => "f32",
            LuaHostArray::F64(_) => "f64",
        }
    }

    pub fn len(&self) -> usize {
        match self {
            LuaHostArray::U32(v) => v.len(),
            LuaHostArray::U16(v) => v.len(),
            LuaHostArray::F32(v) => v.len(),
            LuaHostArray::F64(v) => v.len(),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            LuaHostArray::U32(v) => bytemuck::cast_slice(v),
            LuaHostArray::U16(v) => bytemuck::cast_slice(v),
            LuaHostArray::F32(v) => bytemuck::cast_slice(v),
            LuaHostArray::F64(v) => bytemuck::cast_slice(v),
        }
    }

    /// Builds an array of `dtype` from little-endian bytes (no alignment assumed).
    pub fn from_bytes(dtype: &str, bytes: &[u8]) -> mlua::Result<LuaHostArray> {
        let size = LuaHostArray::new(dtype, 1)?.bytes().len();
        let mut a = LuaHostArray::new(dtype, bytes.len() / size)?;
        let dst: &mut [u8] = match &mut a {
            LuaHostArray::U32(v) => bytemuck::cast_slice_mut(v),
            LuaHostArray::U16(v) => bytemuck::cast_slice_mut(v),
            LuaHostArray::F32(v) => bytemuck::cast_slice_mut(v),
            LuaHostArray::F64(v) => bytemuck::cast_slice_mut(v),
        };
        let n = dst.len();
        dst.copy_from_slice(&bytes[..n]);
        Ok(a)
    }

    pub fn as_u32(&self, what: &str) -> mlua::Result<&Vec<u32>> {
        match self {
            LuaHostArray::U32(v) => Ok(v),
            other => Err(Error::Usage(format!("{what} must be a u32 array, got {}", other.dtype())).into()),
        }
    }

    pub fn as_u32_mut(&mut self, what: &str) -> mlua::Result<&mut Vec<u32>> {
        match self {
            LuaHostArray::U32(v) => Ok(v),
            other => Err(Error::Usage(format!("{what} must be a u32 array, got {}", other.dtype())).into()),
        }
    }

    /// The value at 1-based `i`, or None outside 1..len.
    fn value_at(&self, i: f64) -> Option<f64> {
        (i >= 1.0 && i.fract() == 0.0 && i <= self.len() as f64).then(|| self.get(i as usize - 1))
    }

    fn index(&self, i: i64) -> mlua::Result<usize> {
        if i < 1 || i as usize > self.len() {
            return Err(Error::Usage(format!("index {i} out of range 1..{}", self.len())).into());
        }
        Ok(i as usize - 1)
    }

    fn get(&self, i: usize) -> f64 {
        match self {
            LuaHostArray::U32(v) => v[i] as f64,
            LuaHostArray::U16(v) => v[i] as f64,
            LuaHostArray::F32(v) => v[i] as f64,
            LuaHostArray::F64(v) => v[i],
        }
    }

    fn set(&mut self, i: usize, x: f64) -> mlua::Result<()> {
        let int_ok = |max: f64| x.fract() == 0.0 && (0.0..=max).contains(&x);
        match self {
            LuaHostArray::U32(v) if int_ok(u32::MAX as f64) => v[i] = x as u32,
            LuaHostArray::U16(v) if int_ok(u16::MAX as f64) => v[i] = x as u16,
            LuaHostArray::F32(v) => v[i] = x as f32,
            LuaHostArray::F64(v) => v[i] = x,
            other => return Err(Error::Usage(format!("{x} is not a valid {} value", other.dtype())).into()),
        }
        Ok(())
    }

    /// The array read as `rows` × `cols` (row-major), returned transposed.
    pub fn transposed(&self, rows: usize, cols: usize) -> mlua::Result<LuaHostArray> {
        if rows.checked_mul(cols) != Some(self.len()) {
            return Err(Error::Usage(format!("transposed({rows}, {cols}): the array has {} values", self.len())).into());
        }
        Ok(match self {
            LuaHostArray::U32(v) => LuaHostArray::U32(transpose(v, rows, cols)),
            LuaHostArray::U16(v) => LuaHostArray::U16(transpose(v, rows, cols)),
            LuaHostArray::F32(v) => LuaHostArray::F32(transpose(v, rows, cols)),
            LuaHostArray::F64(v) => LuaHostArray::F64(transpose(v, rows, cols)),
        })
    }

    pub fn from_lua_table(dtype: &str, t: &mlua::Table) -> mlua::Result<LuaHostArray> {
        let n = t.raw_len();
        let mut a = LuaHostArray::new(dtype, n)?;
        for i in 0..n {
            let x: f64 = t.raw_get(i + 1)?;
            a.set(i, x)?;
        }
        Ok(a)
    }
}

/// `count` values from 1-based `first`, a new array of the same dtype.
fn slice(a: &LuaHostArray, first: usize, count: usize) -> mlua::Result<LuaHostArray> {
    if first == 0 || (first - 1).checked_add(count).is_none_or(|end| end > a.len()) {
        return Err(Error::Usage(format!("slice({first}, {count}): the array has {} values", a.len())).into());
    }
    let range = first - 1..first - 1 + count;
    Ok(match a {
        LuaHostArray::U32(v) => LuaHostArray::U32(v[range].to_vec()),
        LuaHostArray::U16(v) => LuaHostArray::U16(v[range].to_vec()),
        LuaHostArray::F32(v) => LuaHostArray::F32(v[range].to_vec()),
        LuaHostArray::F64(v) => LuaHostArray::F64(v[range].to_vec()),
    })
}

/// The first sequence of `length` items that begins with item `start`, in an
/// array of whole sequences (a run's result, a cache's), or None.
fn sequence(a: &LuaHostArray, start: u32, length: usize) -> mlua::Result<Option<LuaHostArray>> {
    let v = a.as_u32("sequences")?;
    if length == 0 || v.len() % length != 0 {
        return Err(Error::Usage(format!("sequence(): {} values are not whole sequences of length {length}", v.len())).into());
    }
    Ok(v.chunks_exact(length).find(|s| s[0] == start).map(|s| LuaHostArray::U32(s.to_vec())))
}

const TYPE: &str = "LuaHostArray";

pub fn methods(lua: &Lua) -> mlua::Result<Methods> {
    let m = Methods::new(lua, TYPE)?;
    m.add(lua, "dtype", |_, this: &LuaHostArray, ()| Ok(this.dtype()))?;
    m.add(lua, "to_table", |lua, this: &LuaHostArray, ()| {
        let t = lua.create_table_with_capacity(this.len(), 0)?;
        for i in 0..this.len() {
            t.raw_set(i + 1, this.get(i))?;
        }
        Ok(t)
    })?;
    m.add(lua, "equals", |_, this: &LuaHostArray, other: UserDataRef<LuaHostArray>| Ok(*this == *other))?;
    // a:transposed(rows, cols): the rows x cols array, by columns.
    m.add(lua, "transposed", |_, this: &LuaHostArray, (rows, cols): (usize, usize)| this.transposed(rows, cols))?;
    m.add(lua, "slice", |_, this: &LuaHostArray, (first, count): (usize, usize)| slice(this, first, count))?;
    // a:set(i, v), also written a[i] = v (the array's __newindex).
    m.add_mut(lua, "set", |_, this: &mut LuaHostArray, (i, x): (i64, f64)| {
        let i = this.index(i)?;
        this.set(i, x)
    })?;
    // seqs:sequence(start, length) -> the sequence beginning at item `start`,
    // or nil and why (no sequence of the array starts there).
    m.add(lua, "sequence", |_, this: &LuaHostArray, (start, length): (u32, usize)| {
        Ok(match sequence(this, start, length)? {
            Some(s) => (Some(s), None),
            None => (None, Some(format!("no sequence of the array starts at item {start}"))),
        })
    })?;
    Ok(m)
}

impl UserData for LuaHostArray {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        // a[i] = v is a:set(i, v), under the error rule like every method.
        f.add_meta_field_with("__newindex", |lua| {
            lua.named_registry_value::<LuaTable>(&registry_key(TYPE))?.get::<mlua::Function>("set")
        });
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_meta_method(MetaMethod::Len, |_, this, ()| Ok(this.len()));
        // a[i] (a number) is a value, nil outside 1..#a; a.name is a method.
        m.add_meta_function(MetaMethod::Index, |lua, (ud, key): (AnyUserData, Value)| match key {
            Value::Integer(i) => Ok(ud.borrow::<LuaHostArray>()?.value_at(i as f64).map_or(Value::Nil, Value::Number)),
            Value::Number(x) => Ok(ud.borrow::<LuaHostArray>()?.value_at(x).map_or(Value::Nil, Value::Number)),
            Value::String(_) => lua.named_registry_value::<LuaTable>(&registry_key(TYPE))?.get::<Value>(key),
            _ => Ok(Value::Nil),
        });
        m.add_meta_method(MetaMethod::ToString, |_, this, ()| {
            Ok(format!("divgpu.array<{}>[{}]", this.dtype(), this.len()))
        });
    }
}

/// A u32 list from Lua: a u32 array, or, where a short list is natural (a
/// run's starts), a plain table of whole numbers such as `{0, 5, 17}`.
pub enum U32s {
    Array(UserDataRef<LuaHostArray>),
    Table(Vec<u32>),
}

impl FromLua for U32s {
    fn from_lua(value: Value, lua: &Lua) -> mlua::Result<Self> {
        match value {
            Value::Table(t) => match LuaHostArray::from_lua_table("u32", &t)? {
                LuaHostArray::U32(v) => Ok(U32s::Table(v)),
                _ => Err(Error::Usage("expected a list of whole numbers".into()).into()),
            },
            Value::UserData(_) => Ok(U32s::Array(UserDataRef::<LuaHostArray>::from_lua(value, lua)?)),
            other => Err(Error::Usage(format!("expected a u32 array or a list of whole numbers, got {}", other.type_name())).into()),
        }
    }
}

impl U32s {
    pub fn as_slice(&self, what: &str) -> mlua::Result<&[u32]> {
        match self {
            U32s::Array(a) => a.as_u32(what).map(|v| v.as_slice()),
            U32s::Table(v) => Ok(v),
        }
    }
}

pub fn register(lua: &Lua, m: &LuaTable) -> mlua::Result<()> {
    // divgpu.array(dtype, n | { values }) -> array
    m.set(
        "array",
        function(lua, |_, (dtype, init): (String, Value)| match init {
            Value::Table(t) => LuaHostArray::from_lua_table(&dtype, &t),
            Value::Integer(n) if n >= 0 => LuaHostArray::new(&dtype, usize::try_from(n).unwrap_or(usize::MAX)),
            // A length past usize (1e300) saturates, and the allocation then fails with an error.
            Value::Number(n) if n >= 0.0 && n.fract() == 0.0 => LuaHostArray::new(&dtype, n as usize),
            Value::Number(n) => Err(Error::Usage(format!("array(): the length {n} is not a whole number >= 0")).into()),
            other => Err(Error::Usage(format!("array(): expected a length or a table, got {}", other.type_name())).into()),
        })?,
    )?;
    Ok(())
}

/// `v` read as `rows` x `cols` (row-major), returned by columns. In square
/// blocks, so that both the reads and the writes stay within a few cache
/// lines at a time: the plain column-by-column gather strides the whole
/// table for every column (378 ms against 93 ms for a 16,384 x 2,048 f32
/// table on a 2-core development machine, one timing each).
pub(super) fn transpose<T: Copy + Default>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
    const BLOCK: usize = 64;
    let mut out = vec![T::default(); v.len()];
    for r0 in (0..rows).step_by(BLOCK) {
        let r1 = (r0 + BLOCK).min(rows);
        for c0 in (0..cols).step_by(BLOCK) {
            for c in c0..(c0 + BLOCK).min(cols) {
                let column = &mut out[c * rows..][..rows];
                for r in r0..r1 {
                    column[r] = v[r * cols + c];
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::transpose;

    fn by_columns(v: &[u32], rows: usize, cols: usize) -> Vec<u32> {
        (0..cols).flat_map(|c| (0..rows).map(move |r| v[r * cols + c])).collect()
    }

    #[test]
    fn blocks_give_the_plain_transpose() {
        for (rows, cols) in [(130, 67), (64, 64), (1, 5), (5, 1), (0, 3), (200, 129)] {
            let v: Vec<u32> = (0..(rows * cols) as u32).collect();
            assert_eq!(transpose(&v, rows, cols), by_columns(&v, rows, cols), "{rows} x {cols}");
        }
        // Twin: the comparison sees a transpose that swaps the shape.
        let v: Vec<u32> = (0..12).collect();
        assert_ne!(transpose(&v, 3, 4), by_columns(&v, 4, 3));
    }
}
