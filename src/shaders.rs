//! Shaders: the shipped ones (compiled by build.rs and embedded) and run-time
//! compilation of GLSL for Lua experiments, with `#include` resolved from the
//! caller's folders first and then from the shipped `shaders/include`.

use std::path::PathBuf;

use crate::error::{Error, Result};

include!(concat!(env!("OUT_DIR"), "/shaders.rs"));

pub struct Shipped {
    pub source: &'static str,
    /// The defines it was compiled with (a variant of a shared source).
    pub defines: &'static [(&'static str, &'static str)],
    pub spirv: &'static [u32],
}

pub fn shipped(name: &str) -> Result<Shipped> {
    SHIPPED
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|&(_, source, defines, spirv)| Shipped { source, defines, spirv })
        .ok_or_else(|| Error::Shader(format!("no shipped shader '{name}'; shipped: {}", shipped_names().join(", "))))
}

pub fn shipped_names() -> Vec<&'static str> {
    SHIPPED.iter().map(|(n, ..)| *n).collect()
}

pub struct CompileRequest<'a> {
    pub name: &'a str,
    pub source: &'a str,
    pub defines: Vec<(String, Option<String>)>,
    pub include_dirs: Vec<PathBuf>,
}

pub fn compile(req: &CompileRequest) -> Result<Vec<u32>> {
    let name = req.name;
    let fail = |what: &str| Error::Shader(format!("shader '{name}': {what}"));
    let compiler = shaderc::Compiler::new().map_err(|e| fail(&format!("could not create the shaderc compiler: {e}")))?;
    let dirs = req.include_dirs.clone();
    let options = crate::shader_options::compile_options(&req.defines, move |file| {
        for dir in &dirs {
            let path = dir.join(file);
            if let Ok(content) = std::fs::read_to_string(&path) {
                return Ok((path.display().to_string(), content));
            }
        }
        INCLUDES
            .iter()
            .find(|(n, _)| *n == file)
            .map(|(n, content)| (format!("<divgpu>/{n}"), content.to_string()))
            .ok_or_else(|| format!("include '{file}' not found in {:?} nor among the shipped includes", dirs))
    })
    .map_err(|e| fail(&e))?;
    compiler
        .compile_into_spirv(req.source, shaderc::ShaderKind::Compute, name, "main", Some(&options))
        .map(|a| a.as_binary().to_vec())
        .map_err(|e| Error::Shader(format!("shader '{name}' failed to compile:\n{e}")))
}
