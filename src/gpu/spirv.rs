//! The SPIR-V reflection divgpu needs, read from the module's words: the
//! storage-buffer bindings of descriptor set 0 (with their block and member
//! names), the push-constant block (its size and its members' names and
//! offsets) and the specialization constants (their ids and names). Rust
//! checks every dispatch's push data against the size read here, so a Lua
//! script and a shader that disagree fail loudly instead of reading garbage,
//! and a kernel's descriptor is checked against the names and their order
//! when its pipeline is made (`Reflection::check`; OpName survives shaderc
//! at -O0): two swapped bindings or push fields are refused there.
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
    /// Specialization constants by id, ascending, with their names where the
    /// module gives one (`layout(local_size_x_id = 0)` has none).
    pub spec_constants: Vec<SpecConstant>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpecConstant {
    pub id: u32,
    pub name: String,
}

/// What a kernel's descriptor says of its shader, checked against the
/// reflection: its bindings' names in binding order, its push fields (u32
/// each) in offset order, and the specialization constants it sets.
#[derive(Debug, Clone, Default)]
pub struct Interface {
    pub bindings: Vec<String>,
    pub push: Vec<String>,
    pub constants: Vec<(String, u32)>,
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
const OP_SPEC_CONSTANT_TRUE: u32 = 48;
const OP_SPEC_CONSTANT_FALSE: u32 = 49;
const OP_SPEC_CONSTANT: u32 = 50;
const OP_VARIABLE: u32 = 59;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
// Decorations and storage classes.
const DECORATION_SPEC_ID: u32 = 1;
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
    /// result id -> SpecId
    spec_ids: HashMap<u32, u32>,
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
            OP_CONSTANT | OP_SPEC_CONSTANT => {
                m.constants.insert(arg(1)?, arg(2)?);
            }
            OP_SPEC_CONSTANT_TRUE | OP_SPEC_CONSTANT_FALSE => {}
            OP_VARIABLE => m.variables.push((arg(0)?, arg(1)?, arg(2)?)),
            OP_DECORATE => match arg(1)? {
                DECORATION_BINDING => {
                    m.bindings.insert(arg(0)?, arg(2)?);
                }
                DECORATION_DESCRIPTOR_SET => {
                    m.sets.insert(arg(0)?, arg(2)?);
                }
                DECORATION_BUFFER_BLOCK => m.buffer_blocks.push(arg(0)?),
                DECORATION_SPEC_ID => {
                    m.spec_ids.insert(arg(0)?, arg(2)?);
                }
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
    let mut spec_constants: Vec<SpecConstant> = m
        .spec_ids
        .iter()
        .map(|(&target, &id)| SpecConstant { id, name: m.names.get(&target).cloned().unwrap_or_default() })
        .collect();
    spec_constants.sort_by_key(|c| c.id);
    Ok(Reflection {
        push_constant_size,
        bindings: binding_names.iter().map(|b| b.binding).collect(),
        binding_names,
        push_fields,
        spec_constants,
    })
}

/// `InvNorm` -> `inv_norm`, `GBlocks` -> `g_blocks`, `StateF64` -> `state_f64`:
/// the name a descriptor gives the binding of a block.
pub fn snake_case(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if prev.is_ascii_lowercase() || prev.is_ascii_digit() || (prev.is_ascii_uppercase() && next_lower) {
                out.push('_');
            }
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

impl Reflection {
    /// Refuses a descriptor that does not say what the shader declares: a
    /// binding whose name is not its block's (in snake case) at the same
    /// place in binding order, push fields that are not the block's members
    /// (u32 each) in offset order, or a specialization constant the shader
    /// lacks or names otherwise. The message names both sides.
    pub fn check(&self, d: &Interface) -> Result<(), String> {
        let shader: Vec<String> = self.binding_names.iter().map(|b| snake_case(&b.block)).collect();
        if shader != d.bindings {
            let at = shader.iter().zip(&d.bindings).position(|(a, b)| a != b).unwrap_or(shader.len().min(d.bindings.len()));
            return Err(format!(
                "the shader's bindings are [{}] (its blocks in snake case, by binding number), the descriptor's \
                 [{}]: they differ at position {}",
                shader.join(", "),
                d.bindings.join(", "),
                at + 1
            ));
        }
        let fields: Vec<&str> = self.push_fields.iter().map(|f| f.name.as_str()).collect();
        let u32s = self.push_fields.iter().enumerate().all(|(i, f)| f.size == 4 && f.offset == 4 * i as u32);
        if fields != d.push || !u32s {
            return Err(format!(
                "the shader's push constants are [{}] ({} bytes), the descriptor's [{}] (u32 fields, in order)",
                fields.join(", "),
                self.push_constant_size,
                d.push.join(", ")
            ));
        }
        for (name, id) in &d.constants {
            match self.spec_constants.iter().find(|c| c.id == *id) {
                None => return Err(format!("the shader has no specialization constant {id} (the descriptor's '{name}')")),
                Some(c) if !c.name.is_empty() && !c.name.eq_ignore_ascii_case(name) => {
                    return Err(format!(
                        "specialization constant {id} is the shader's {}, the descriptor's '{name}'",
                        c.name
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
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
        assert_eq!(blocks, vec!["Embeddings", "InvNorm", "GBlocks"]);
        assert_eq!(r.binding_names[0].member, "emb");
        let fields: Vec<&str> = r.push_fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(fields, vec!["num_items", "dim", "tile_row_begin", "tile_row_end", "block_rows"]);
        assert!(r.push_fields.iter().enumerate().all(|(i, f)| f.offset == 4 * i as u32 && f.size == 4));
        Ok(())
    }

    fn interface(bindings: &[&str], push: &[&str], constants: &[(&str, u32)]) -> Interface {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        Interface {
            bindings: own(bindings),
            push: own(push),
            constants: constants.iter().map(|(n, i)| (n.to_string(), *i)).collect(),
        }
    }

    #[test]
    fn block_names_in_snake_case() {
        assert_eq!(snake_case("InvNorm"), "inv_norm");
        assert_eq!(snake_case("GBlocks"), "g_blocks");
        assert_eq!(snake_case("StateF64"), "state_f64");
        assert_eq!(snake_case("Embeddings16"), "embeddings16");
        assert_eq!(snake_case("F32In"), "f32_in");
    }

    #[test]
    fn a_descriptor_is_checked_by_name_and_order() -> crate::error::Result<()> {
        let r = reflected("tiled")?;
        let bindings = ["embeddings", "inv_norm", "centroids", "masks", "winners"];
        let push = ["num_items", "dim", "step", "ring", "tile_size"];
        let good = interface(&bindings, &push, &[("workgroup_size", 0), ("max_dim", 1)]);
        assert_eq!(r.check(&good), Ok(()));
        // Twins: two push fields swapped, two bindings swapped, a field or a
        // binding missing, a constant the shader lacks or names otherwise.
        let swapped_push = interface(&bindings, &["num_items", "dim", "ring", "step", "tile_size"], &[]);
        let e = r.check(&swapped_push).err().unwrap_or_default();
        assert!(e.starts_with("the shader's push constants are [num_items, dim, step, ring, tile_size] (20 bytes), the descriptor's [num_items, dim, ring, step, tile_size]"), "{e}");
        let swapped = interface(&["embeddings", "inv_norm", "masks", "centroids", "winners"], &push, &[]);
        let e = r.check(&swapped).err().unwrap_or_default();
        assert!(e.ends_with("they differ at position 3"), "{e}");
        assert!(r.check(&interface(&bindings[..4], &push, &[])).is_err());
        assert!(r.check(&interface(&bindings, &push[..4], &[])).is_err());
        let e = r.check(&interface(&bindings, &push, &[("max_dim", 7)])).err().unwrap_or_default();
        assert_eq!(e, "the shader has no specialization constant 7 (the descriptor's 'max_dim')");
        let e = r.check(&interface(&bindings, &push, &[("tile", 1)])).err().unwrap_or_default();
        assert_eq!(e, "specialization constant 1 is the shader's MAX_DIM, the descriptor's 'tile'");
        Ok(())
    }

    #[test]
    fn reads_the_specialization_constants() -> crate::error::Result<()> {
        let r = reflected("gram_build")?;
        let names: Vec<(u32, &str)> = r.spec_constants.iter().map(|c| (c.id, c.name.as_str())).collect();
        // The workgroup size (local_size_x_id, _y_id) has no name; 101 and 102
        // are the device's switches every kernel of the contract's arithmetic takes.
        let tiling = [(0, ""), (1, ""), (2, "TM"), (3, "TN"), (4, "SLICE"), (5, "ACC_SLOTS"), (6, "STAGE")];
        let switches = [(101, "EXACT_UNDERFLOW"), (102, "FLUSH_DENORMALS")];
        assert_eq!(names, [&tiling[..], &switches[..]].concat());
        // The tiling compiled in: the device's switches alone.
        let built: Vec<(u32, String)> =
            reflected("gram_build-16x16x8x8x8")?.spec_constants.iter().map(|c| (c.id, c.name.clone())).collect();
        assert_eq!(built, switches.iter().map(|&(id, n)| (id, n.to_string())).collect::<Vec<_>>());
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
