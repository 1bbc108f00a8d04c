//! The SPIR-V reflection divgpu needs, read from the module's words: the
//! storage-buffer bindings of descriptor set 0 (with their block and member
//! names) and the push-constant block (its size and its members' names and
//! offsets). Rust checks every dispatch's push data against the size read
//! here, so a Lua script and a shader that disagree fail loudly instead of
//! reading garbage, and `divgpu.kernel` checks a descriptor against the
//! names (OpName survives shaderc at -O0).
//!
//! A reader of its own, not a general SPIR-V library: it needs a handful of
//! instructions and skips every other one by its word count, so a module with
//! instructions no library knows yet (cooperative matrices) reflects the same.

use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub binding: u32,
    /// The block's type name (`Embeddings` in `buffer Embeddings { float emb[]; }`).
    pub block: String,
    /// Its first member's name (`emb`).
    pub member: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PushField {
    pub name: String,
    pub offset: u32,
    pub size: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Reflection {
    /// Bytes in the push-constant block (0 when the shader declares none).
    pub push_constant_size: u32,
    /// Binding numbers of buffer descriptors in set 0, ascending.
    pub bindings: Vec<u32>,
    /// The same bindings with their names, ascending.
    pub binding_names: Vec<Binding>,
    /// The push-constant block's members in offset order.
    pub push_fields: Vec<PushField>,
}

const MAGIC: u32 = 0x0723_0203;
// Opcodes.
const OP_NAME: u32 = 5;
const OP_MEMBER_NAME: u32 = 6;
const OP_TYPE_BOOL: u32 = 20;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_VARIABLE: u32 = 59;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
// Decorations and storage classes.
const DECORATION_BUFFER_BLOCK: u32 = 3;
const DECORATION_BINDING: u32 = 33;
const DECORATION_DESCRIPTOR_SET: u32 = 34;
const DECORATION_OFFSET: u32 = 35;
const STORAGE_UNIFORM: u32 = 2;
const STORAGE_PUSH_CONSTANT: u32 = 9;
const STORAGE_STORAGE_BUFFER: u32 = 12;

/// A literal string operand: UTF-8, NUL-terminated, packed four bytes a word.
fn literal_string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[derive(Default)]
struct Module {
    names: HashMap<u32, String>,
    member_names: HashMap<(u32, u32), String>,
    member_offsets: HashMap<(u32, u32), u32>,
    bindings: HashMap<u32, u32>,
    sets: HashMap<u32, u32>,
    buffer_blocks: Vec<u32>,
    /// Scalar and composite types' byte sizes, where known.
    sizes: HashMap<u32, u32>,
    constants: HashMap<u32, u32>,
    structs: HashMap<u32, Vec<u32>>,
    /// pointer type -> (storage class, pointee)
    pointers: HashMap<u32, (u32, u32)>,
    /// (pointer type, variable id, storage class)
    variables: Vec<(u32, u32, u32)>,
}

fn parse(words: &[u32]) -> Result<Module, String> {
    if words.len() < 5 || words[0] != MAGIC {
        return Err("not a SPIR-V module (no magic number)".into());
    }
    let mut m = Module::default();
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let op = words[at] & 0xffff;
        if count == 0 || at + count > words.len() {
            return Err(format!("SPIR-V instruction at word {at} runs past the module"));
        }
        let w = &words[at + 1..at + count];
        let arg = |i: usize| w.get(i).copied().ok_or_else(|| format!("SPIR-V opcode {op} at word {at} is short"));
        match op {
            OP_NAME => {
                m.names.insert(arg(0)?, literal_string(&w[1..]));
            }
            OP_MEMBER_NAME => {
                m.member_names.insert((arg(0)?, arg(1)?), literal_string(&w[2..]));
            }
            OP_TYPE_BOOL => {
                m.sizes.insert(arg(0)?, 4);
            }
            OP_TYPE_INT | OP_TYPE_FLOAT => {
                m.sizes.insert(arg(0)?, arg(1)? / 8);
            }
            OP_TYPE_VECTOR => {
                if let Some(&s) = m.sizes.get(&arg(1)?) {
                    m.sizes.insert(arg(0)?, s * arg(2)?);
                }
            }
            OP_TYPE_ARRAY => {
                if let (Some(&s), Some(&n)) = (m.sizes.get(&arg(1)?), m.constants.get(&arg(2)?)) {
                    m.sizes.insert(arg(0)?, s * n);
                }
            }
            OP_TYPE_STRUCT => {
                m.structs.insert(arg(0)?, w[1..].to_vec());
            }
            OP_TYPE_POINTER => {
                m.pointers.insert(arg(0)?, (arg(1)?, arg(2)?));
            }
            OP_CONSTANT => {
                m.constants.insert(arg(1)?, arg(2)?);
            }
            OP_VARIABLE => m.variables.push((arg(0)?, arg(1)?, arg(2)?)),
            OP_DECORATE => match arg(1)? {
                DECORATION_BINDING => {
                    m.bindings.insert(arg(0)?, arg(2)?);
                }
                DECORATION_DESCRIPTOR_SET => {
                    m.sets.insert(arg(0)?, arg(2)?);
                }
                DECORATION_BUFFER_BLOCK => m.buffer_blocks.push(arg(0)?),
                _ => {}
            },
            OP_MEMBER_DECORATE if arg(2)? == DECORATION_OFFSET => {
                m.member_offsets.insert((arg(0)?, arg(1)?), arg(3)?);
            }
            _ => {}
        }
        at += count;
    }
    Ok(m)
}

pub fn reflect(words: &[u32]) -> Result<Reflection, String> {
    let m = parse(words)?;
    let mut binding_names = Vec::new();
    let mut push_fields = Vec::new();
    for &(pointer, variable, class) in &m.variables {
        let pointee = m.pointers.get(&pointer).map(|&(_, t)| t).unwrap_or(0);
        let name = |id: u32| m.names.get(&id).cloned().unwrap_or_default();
        let is_buffer =
            class == STORAGE_STORAGE_BUFFER || (class == STORAGE_UNIFORM && m.buffer_blocks.contains(&pointee));
        if is_buffer {
            let binding = m.bindings.get(&variable).copied().ok_or_else(|| {
                format!("storage buffer '{}' has no binding decoration", name(pointee))
            })?;
            let set = m.sets.get(&variable).copied().unwrap_or(0);
            if set != 0 {
                return Err(format!(
                    "binding {binding} of set {set} is not a storage buffer of set 0: divgpu binds storage buffers only"
                ));
            }
            let member = m.member_names.get(&(pointee, 0)).cloned().unwrap_or_default();
            binding_names.push(Binding { binding, block: name(pointee), member });
        } else if class == STORAGE_UNIFORM && m.bindings.contains_key(&variable) {
            let binding = m.bindings[&variable];
            return Err(format!("binding {binding} is a uniform buffer: divgpu binds storage buffers only"));
        } else if class == STORAGE_PUSH_CONSTANT {
            let members = m.structs.get(&pointee).ok_or("the push-constant block is not a struct")?;
            for (i, &ty) in members.iter().enumerate() {
                let key = (pointee, i as u32);
                let offset = *m.member_offsets.get(&key).ok_or("a push-constant member has no offset")?;
                let size = *m.sizes.get(&ty).ok_or_else(|| {
                    format!("push-constant member {i} has a type divgpu cannot size (scalars, vectors and arrays only)")
                })?;
                let name = m.member_names.get(&key).cloned().unwrap_or_default();
                push_fields.push(PushField { name, offset, size });
            }
        }
    }
    binding_names.sort_by_key(|b| b.binding);
    push_fields.sort_by_key(|f| f.offset);
    let push_constant_size = push_fields.iter().map(|f| f.offset + f.size).max().unwrap_or(0);
    Ok(Reflection {
        push_constant_size,
        bindings: binding_names.iter().map(|b| b.binding).collect(),
        binding_names,
        push_fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reflected(name: &str) -> crate::error::Result<Reflection> {
        reflect(crate::shaders::shipped(name)?.spirv).map_err(crate::error::Error::Shader)
    }

    #[test]
    fn reads_the_shipped_shaders() -> crate::error::Result<()> {
        let r = reflected("baseline")?;
        assert_eq!(r.push_constant_size, 16);
        assert_eq!(r.bindings, vec![0, 1, 2, 3, 4]);
        let r = reflected("tiled")?;
        assert_eq!(r.push_constant_size, 20);
        let r = reflected("tile-dispatch-fp16-exact")?;
        assert_eq!(r.push_constant_size, 28); // 7 u32: tile range and phase
        assert_eq!(r.bindings, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        // Buffer references (G by device address) are not bindings.
        let r = reflected("gram")?;
        assert_eq!(r.push_constant_size, 28);
        assert_eq!(r.bindings, (0..10).collect::<Vec<u32>>());
        let r = reflected("gram_build")?;
        assert_eq!(r.push_constant_size, 20);
        assert_eq!(r.bindings, vec![0, 1, 2]);
        Ok(())
    }

    #[test]
    fn names_the_bindings_and_push_fields() -> crate::error::Result<()> {
        let r = reflected("gram_build")?;
        let blocks: Vec<&str> = r.binding_names.iter().map(|b| b.block.as_str()).collect();
        assert_eq!(blocks, vec!["Embeddings", "InvNorms", "GBlocks"]);
        assert_eq!(r.binding_names[0].member, "emb");
        let fields: Vec<&str> = r.push_fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(fields, vec!["num_items", "dim", "tile_row_begin", "tile_row_end", "block_rows"]);
        assert!(r.push_fields.iter().enumerate().all(|(i, f)| f.offset == 4 * i as u32 && f.size == 4));
        Ok(())
    }

    #[test]
    fn rejects_garbage() {
        assert!(reflect(&[1, 2, 3, 4, 5]).is_err());
        // A module whose last instruction claims more words than there are.
        let mut words = crate::shaders::shipped("baseline").map(|s| s.spirv.to_vec()).unwrap_or_default();
        assert!(reflect(&words).is_ok());
        words.push((10 << 16) | OP_NAME);
        assert!(reflect(&words).is_err());
    }
}
