//! The SPIR-V reflection divgpu needs, through `rspirv-reflect`: the size of
//! the push-constant block and the storage-buffer bindings of descriptor set
//! 0. Rust checks every dispatch's push data against the size read here, so a
//! Lua script and a shader that disagree fail loudly instead of reading
//! garbage, and `divgpu.kernel` checks a descriptor against the bindings.

use rspirv_reflect::{DescriptorType, Reflection as Module};

#[derive(Debug, Clone, PartialEq)]
pub struct Reflection {
    /// Bytes in the push-constant block (0 when the shader declares none).
    pub push_constant_size: u32,
    /// Binding numbers of buffer descriptors in set 0, ascending.
    pub bindings: Vec<u32>,
}

pub fn reflect(words: &[u32]) -> Result<Reflection, String> {
    // rspirv-reflect panics on push-constant types it cannot size; a shader
    // from a Lua experiment must give an error, not unwind through Lua.
    std::panic::catch_unwind(|| reflect_module(words)).unwrap_or_else(|_| {
        Err("SPIR-V reflection failed on an unsupported push-constant type".into())
    })
}

fn reflect_module(words: &[u32]) -> Result<Reflection, String> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let module = Module::new_from_spirv(&bytes).map_err(|e| format!("not a valid SPIR-V module: {e}"))?;
    let sets = module.get_descriptor_sets().map_err(|e| format!("SPIR-V descriptor reflection failed: {e}"))?;
    let mut bindings = Vec::new();
    for (&set, set_bindings) in &sets {
        for (&binding, info) in set_bindings {
            if set != 0 || info.ty != DescriptorType::STORAGE_BUFFER {
                return Err(format!(
                    "binding {binding} of set {set} is not a storage buffer of set 0: divgpu binds storage buffers only"
                ));
            }
            bindings.push(binding);
        }
    }
    let push_constant_size = module
        .get_push_constant_range()
        .map_err(|e| format!("SPIR-V push-constant reflection failed: {e}"))?
        .map(|p| p.offset + p.size)
        .unwrap_or(0);
    Ok(Reflection { push_constant_size, bindings })
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
        assert_eq!(r.push_constant_size, 24);
        assert_eq!(r.bindings, (0..10).collect::<Vec<u32>>());
        let r = reflected("gram_build")?;
        assert_eq!(r.push_constant_size, 28);
        assert_eq!(r.bindings, vec![0]);
        Ok(())
    }

    #[test]
    fn rejects_garbage() {
        assert!(reflect(&[1, 2, 3, 4, 5]).is_err());
    }
}
