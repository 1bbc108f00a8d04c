//! The little SPIR-V reflection divgpu needs: the size of the push-constant
//! block and the storage-buffer bindings of descriptor set 0. Rust checks
//! every dispatch's push data against the size read here, so a Lua script and
//! a shader that disagree fail loudly instead of reading garbage.

use std::collections::HashMap;

const MAGIC: u32 = 0x0723_0203;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const DECORATION_ARRAY_STRIDE: u32 = 6;
const DECORATION_BINDING: u32 = 33;
const DECORATION_DESCRIPTOR_SET: u32 = 34;
const DECORATION_OFFSET: u32 = 35;
const STORAGE_UNIFORM: u32 = 2;
const STORAGE_PUSH_CONSTANT: u32 = 9;
const STORAGE_STORAGE_BUFFER: u32 = 12;

#[derive(Debug, Clone, PartialEq)]
pub struct Reflection {
    /// Bytes in the push-constant block (0 when the shader declares none).
    pub push_constant_size: u32,
    /// Binding numbers of buffer descriptors in set 0, ascending.
    pub bindings: Vec<u32>,
}

enum Type {
    Scalar(u32),
    Vector(u32, u32),
    /// Element type is not needed: size = length * ArrayStride.
    Array(u32),
    Struct(Vec<u32>),
    Pointer(u32),
}

pub fn reflect(words: &[u32]) -> Result<Reflection, String> {
    if words.len() < 5 || words[0] != MAGIC {
        return Err("not a SPIR-V module (bad magic number)".into());
    }
    let mut types: HashMap<u32, Type> = HashMap::new();
    let mut constants: HashMap<u32, u32> = HashMap::new();
    let mut strides: HashMap<u32, u32> = HashMap::new();
    let mut offsets: HashMap<(u32, u32), u32> = HashMap::new();
    let mut bindings: HashMap<u32, u32> = HashMap::new();
    let mut sets: HashMap<u32, u32> = HashMap::new();
    let mut variables: Vec<(u32, u32, u32)> = Vec::new(); // (pointer type, id, storage class)

    let mut i = 5;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        let op = words[i] & 0xffff;
        if count == 0 || i + count > words.len() {
            return Err(format!("malformed SPIR-V instruction at word {i}"));
        }
        let a = &words[i + 1..i + count];
        match op {
            OP_DECORATE if a.len() >= 3 => match a[1] {
                DECORATION_ARRAY_STRIDE => {
                    strides.insert(a[0], a[2]);
                }
                DECORATION_BINDING => {
                    bindings.insert(a[0], a[2]);
                }
                DECORATION_DESCRIPTOR_SET => {
                    sets.insert(a[0], a[2]);
                }
                _ => {}
            },
            OP_MEMBER_DECORATE if a.len() >= 4 && a[2] == DECORATION_OFFSET => {
                offsets.insert((a[0], a[1]), a[3]);
            }
            OP_TYPE_INT | OP_TYPE_FLOAT if a.len() >= 2 => {
                types.insert(a[0], Type::Scalar(a[1] / 8));
            }
            OP_TYPE_VECTOR if a.len() >= 3 => {
                types.insert(a[0], Type::Vector(a[1], a[2]));
            }
            OP_TYPE_ARRAY if a.len() >= 3 => {
                types.insert(a[0], Type::Array(a[2]));
            }
            OP_TYPE_STRUCT if !a.is_empty() => {
                types.insert(a[0], Type::Struct(a[1..].to_vec()));
            }
            OP_TYPE_POINTER if a.len() >= 3 => {
                types.insert(a[0], Type::Pointer(a[2]));
            }
            OP_CONSTANT if a.len() >= 3 => {
                constants.insert(a[1], a[2]);
            }
            OP_VARIABLE if a.len() >= 3 => variables.push((a[0], a[1], a[2])),
            _ => {}
        }
        i += count;
    }

    fn size_of(
        id: u32,
        types: &HashMap<u32, Type>,
        constants: &HashMap<u32, u32>,
        strides: &HashMap<u32, u32>,
        offsets: &HashMap<(u32, u32), u32>,
        depth: u32,
    ) -> Result<u32, String> {
        if depth > 16 {
            return Err("push-constant type nests too deeply".into());
        }
        match types.get(&id) {
            Some(Type::Scalar(bytes)) => Ok(*bytes),
            Some(Type::Vector(component, n)) => {
                Ok(size_of(*component, types, constants, strides, offsets, depth + 1)? * n)
            }
            Some(Type::Array(length)) => {
                let n = constants.get(length).ok_or("array length is not a plain constant")?;
                let stride = strides.get(&id).ok_or("array without ArrayStride")?;
                Ok(n * stride)
            }
            Some(Type::Struct(members)) => {
                let mut end = 0;
                for (m, &member) in members.iter().enumerate() {
                    let offset = offsets.get(&(id, m as u32)).copied().unwrap_or(0);
                    end = end.max(offset + size_of(member, types, constants, strides, offsets, depth + 1)?);
                }
                Ok(end)
            }
            _ => Err(format!("unsupported type %{id} in the push-constant block")),
        }
    }

    let mut push_constant_size = 0;
    let mut binding_list = Vec::new();
    for &(pointer, id, storage) in &variables {
        match storage {
            STORAGE_PUSH_CONSTANT => {
                let Some(Type::Pointer(pointee)) = types.get(&pointer) else {
                    return Err("push-constant variable without a pointer type".into());
                };
                push_constant_size = size_of(*pointee, &types, &constants, &strides, &offsets, 0)?;
            }
            STORAGE_STORAGE_BUFFER | STORAGE_UNIFORM => {
                if let Some(&b) = bindings.get(&id) {
                    let set = sets.get(&id).copied().unwrap_or(0);
                    if set != 0 {
                        return Err(format!("binding {b} is in descriptor set {set}; divgpu uses set 0 only"));
                    }
                    binding_list.push(b);
                }
            }
            _ => {}
        }
    }
    binding_list.sort_unstable();
    // Two blocks may alias one binding (e.g. float and vec4 views of a table).
    binding_list.dedup();
    Ok(Reflection { push_constant_size, bindings: binding_list })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_shipped_baseline_shader() -> crate::error::Result<()> {
        let reflected = |name: &str| -> crate::error::Result<Reflection> {
            reflect(crate::shaders::shipped(name)?.spirv).map_err(crate::error::Error::Shader)
        };
        let r = reflected("baseline")?;
        assert_eq!(r.push_constant_size, 16);
        assert_eq!(r.bindings, vec![0, 1, 2, 3, 4]);
        let r = reflected("tiled")?;
        assert_eq!(r.push_constant_size, 20);
        let r = reflected("tile-dispatch-fp16-exact")?;
        assert_eq!(r.push_constant_size, 28); // 7 u32: tile range and phase
        assert_eq!(r.bindings, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        Ok(())
    }

    #[test]
    fn rejects_garbage() {
        assert!(reflect(&[1, 2, 3, 4, 5]).is_err());
    }
}
