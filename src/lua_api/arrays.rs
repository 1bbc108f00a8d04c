//! `HostArray`: typed arrays in native memory (u32, u16, f32, f64). Tables,
//! starts, centroids and sequences move between files, the GPU and the CPU
//! mirror as these, never as flattened Lua tables. Lua sees a 1-based array:
//! `a[i]`, `a[i] = v`, `#a`.

use mlua::{MetaMethod, UserData, UserDataMethods};

use crate::error::Error;

#[derive(Debug, Clone, PartialEq)]
pub enum HostArray {
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

impl HostArray {
    /// An array of `len` zeros; out of host memory is an error, not an abort.
    pub fn new(dtype: &str, len: usize) -> mlua::Result<HostArray> {
        Ok(match dtype {
            "u32" => HostArray::U32(zeroed(dtype, len)?),
            "u16" => HostArray::U16(zeroed(dtype, len)?),
            "f32" => HostArray::F32(zeroed(dtype, len)?),
            "f64" => HostArray::F64(zeroed(dtype, len)?),
            other => return Err(Error::Usage(format!("unknown dtype '{other}' (u32, u16, f32 or f64)")).into()),
        })
    }

    pub fn dtype(&self) -> &'static str {
        match self {
            HostArray::U32(_) => "u32",
            HostArray::U16(_) => "u16",
            HostArray::F32(_) => "f32",
            HostArray::F64(_) => "f64",
        }
    }

    pub fn len(&self) -> usize {
        match self {
            HostArray::U32(v) => v.len(),
            HostArray::U16(v) => v.len(),
            HostArray::F32(v) => v.len(),
            HostArray::F64(v) => v.len(),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            HostArray::U32(v) => bytemuck::cast_slice(v),
            HostArray::U16(v) => bytemuck::cast_slice(v),
            HostArray::F32(v) => bytemuck::cast_slice(v),
            HostArray::F64(v) => bytemuck::cast_slice(v),
        }
    }

    /// Builds an array of `dtype` from little-endian bytes (no alignment assumed).
    pub fn from_bytes(dtype: &str, bytes: &[u8]) -> mlua::Result<HostArray> {
        let size = HostArray::new(dtype, 1)?.bytes().len();
        let mut a = HostArray::new(dtype, bytes.len() / size)?;
        let dst: &mut [u8] = match &mut a {
            HostArray::U32(v) => bytemuck::cast_slice_mut(v),
            HostArray::U16(v) => bytemuck::cast_slice_mut(v),
            HostArray::F32(v) => bytemuck::cast_slice_mut(v),
            HostArray::F64(v) => bytemuck::cast_slice_mut(v),
        };
        let n = dst.len();
        dst.copy_from_slice(&bytes[..n]);
        Ok(a)
    }

    pub fn as_u32(&self, what: &str) -> mlua::Result<&Vec<u32>> {
        match self {
            HostArray::U32(v) => Ok(v),
            other => Err(Error::Usage(format!("{what} must be a u32 array, got {}", other.dtype())).into()),
        }
    }

    pub fn as_u32_mut(&mut self, what: &str) -> mlua::Result<&mut Vec<u32>> {
        match self {
            HostArray::U32(v) => Ok(v),
            other => Err(Error::Usage(format!("{what} must be a u32 array, got {}", other.dtype())).into()),
        }
    }

    fn index(&self, i: i64) -> mlua::Result<usize> {
        if i < 1 || i as usize > self.len() {
            return Err(Error::Usage(format!("index {i} out of range 1..{}", self.len())).into());
        }
        Ok(i as usize - 1)
    }

    fn get(&self, i: usize) -> f64 {
        match self {
            HostArray::U32(v) => v[i] as f64,
            HostArray::U16(v) => v[i] as f64,
            HostArray::F32(v) => v[i] as f64,
            HostArray::F64(v) => v[i],
        }
    }

    fn set(&mut self, i: usize, x: f64) -> mlua::Result<()> {
        let int_ok = |max: f64| x.fract() == 0.0 && (0.0..=max).contains(&x);
        match self {
            HostArray::U32(v) if int_ok(u32::MAX as f64) => v[i] = x as u32,
            HostArray::U16(v) if int_ok(u16::MAX as f64) => v[i] = x as u16,
            HostArray::F32(v) => v[i] = x as f32,
            HostArray::F64(v) => v[i] = x,
            other => return Err(Error::Usage(format!("{x} is not a valid {} value", other.dtype())).into()),
        }
        Ok(())
    }

    /// The array read as `rows` × `cols` (row-major), returned transposed.
    pub fn transposed(&self, rows: usize, cols: usize) -> mlua::Result<HostArray> {
        if rows.checked_mul(cols) != Some(self.len()) {
            return Err(Error::Usage(format!("transposed({rows}, {cols}): the array has {} values", self.len())).into());
        }
        fn t<T: Copy>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
            let mut out = Vec::with_capacity(v.len());
            for c in 0..cols {
                out.extend((0..rows).map(|r| v[r * cols + c]));
            }
            out
        }
        Ok(match self {
            HostArray::U32(v) => HostArray::U32(t(v, rows, cols)),
            HostArray::U16(v) => HostArray::U16(t(v, rows, cols)),
            HostArray::F32(v) => HostArray::F32(t(v, rows, cols)),
            HostArray::F64(v) => HostArray::F64(t(v, rows, cols)),
        })
    }

    pub fn from_lua_table(dtype: &str, t: &mlua::Table) -> mlua::Result<HostArray> {
        let n = t.raw_len();
        let mut a = HostArray::new(dtype, n)?;
        for i in 0..n {
            let x: f64 = t.raw_get(i + 1)?;
            a.set(i, x)?;
        }
        Ok(a)
    }
}

impl UserData for HostArray {
    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("dtype", |_, this, ()| Ok(this.dtype()));
        m.add_method("to_table", |lua, this, ()| {
            let t = lua.create_table_with_capacity(this.len(), 0)?;
            for i in 0..this.len() {
                t.raw_set(i + 1, this.get(i))?;
            }
            Ok(t)
        });
        m.add_method("equals", |_, this, other: mlua::UserDataRef<HostArray>| Ok(*this == *other));
        // a:transposed(rows, cols): the rows x cols array, by columns.
        m.add_method("transposed", |_, this, (rows, cols): (usize, usize)| this.transposed(rows, cols));
        m.add_meta_method(MetaMethod::Len, |_, this, ()| Ok(this.len()));
        m.add_meta_method(MetaMethod::Index, |_, this, i: i64| Ok(this.get(this.index(i)?)));
        m.add_meta_method_mut(MetaMethod::NewIndex, |_, this, (i, x): (i64, f64)| {
            let i = this.index(i)?;
            this.set(i, x)
        });
        m.add_meta_method(MetaMethod::ToString, |_, this, ()| {
            Ok(format!("divgpu.array<{}>[{}]", this.dtype(), this.len()))
        });
    }
}
