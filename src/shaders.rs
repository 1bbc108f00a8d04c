//! Shaders: the shipped ones (compiled by build.rs and embedded) and run-time
//! compilation of GLSL for Lua experiments, with `#include` resolved from the
//! caller's folders first and then from the shipped `shaders/include`.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// A kernel (`shaders/NAME.comp`) and its variant axes.
pub struct Kernel {
    pub name: &'static str,
    pub axes: &'static [Axis],
}

/// One variant axis of a kernel: its values, the default first.
pub struct Axis {
    pub name: &'static str,
    pub values: &'static [&'static str],
}

/// A shipped shader: one variant of a kernel, compiled at build time.
pub struct Shipped {
    pub name: &'static str,
    pub kernel: &'static str,
    /// Its value on each of the kernel's axes, in the axes' order.
    pub choice: &'static [(&'static str, &'static str)],
    pub source: &'static str,
    /// The defines it was compiled with (a variant of a shared source).
    pub defines: &'static [(&'static str, &'static str)],
    pub spirv: &'static [u32],
}

include!(concat!(env!("OUT_DIR"), "/shaders.rs"));

pub fn shipped(name: &str) -> Result<&'static Shipped> {
    SHIPPED
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| Error::Usage(format!("no shipped shader '{name}'; shipped: {}", shipped_names().join(", "))))
}

pub fn shipped_names() -> Vec<&'static str> {
    SHIPPED.iter().map(|s| s.name).collect()
}

/// The kernels of which this build compiled at least one variant (see `NOT_BUILT`).
pub fn built_kernels() -> Vec<&'static str> {
    KERNELS.iter().map(|k| k.name).filter(|k| SHIPPED.iter().any(|s| s.kernel == *k)).collect()
}

pub fn kernel(name: &str) -> Result<&'static Kernel> {
    KERNELS.iter().find(|k| k.name == name).ok_or_else(|| {
        let names: Vec<&str> = KERNELS.iter().map(|k| k.name).collect();
        Error::Usage(format!("no kernel '{name}'; the kernels are {}", names.join(", ")))
    })
}

/// The shipped variant of `kernel` with the given axis values (an axis not
/// named takes its default). An unknown axis or value is an error naming
/// what there is.
pub fn variant(kernel_name: &str, wanted: &[(String, String)]) -> Result<&'static Shipped> {
    let k = kernel(kernel_name)?;
    for (axis, value) in wanted {
        let a = k.axes.iter().find(|a| a.name == axis).ok_or_else(|| {
            let names: Vec<&str> = k.axes.iter().map(|a| a.name).collect();
            Error::Usage(format!(
                "kernel '{kernel_name}' has no axis '{axis}' (its axes: {})",
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ))
        })?;
        if !a.values.contains(&value.as_str()) {
            return Err(Error::Usage(format!(
                "kernel '{kernel_name}': {axis} '{value}' is not one of {}",
                a.values.join(", ")
            )));
        }
    }
    let chosen = |axis: &str| wanted.iter().find(|(a, _)| a == axis).map(|(_, v)| v.as_str());
    SHIPPED
        .iter()
        .filter(|s| s.kernel == kernel_name)
        .find(|s| s.choice.iter().all(|(axis, value)| chosen(axis).unwrap_or(default_of(k, axis)) == *value))
        .ok_or_else(|| Error::Shader(format!("kernel '{kernel_name}': no shipped variant for {wanted:?}")))
}

fn default_of(k: &Kernel, axis: &str) -> &'static str {
    k.axes.iter().find(|a| a.name == axis).and_then(|a| a.values.first()).copied().unwrap_or("")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, v)| (a.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_variant_is_found_by_its_axis_values() -> Result<()> {
        let v = variant("baseline", &choice(&[("layout", "columns"), ("precision", "fp16-exact")]))?;
        assert_eq!(v.name, "baseline-fp16-exact-columns");
        assert_eq!(v.defines, &[("DIVGPU_FP16_EXACT", "1"), ("DIVGPU_COLUMNS", "1")]);
        // An axis not named takes its default, which adds nothing to the name.
        assert_eq!(variant("baseline", &choice(&[("precision", "fp16")]))?.name, "baseline-fp16");
        assert_eq!(variant("tiled", &[])?.name, "tiled");
        assert_eq!(variant("gram_build", &choice(&[("tiling", "16x16x8x8x8")]))?.name, "gram_build-16x16x8x8x8");
        // Every combination ships: 3 precisions x 2 layouts.
        assert_eq!(SHIPPED.iter().filter(|s| s.kernel == "tile-dispatch").count(), 6);
        Ok(())
    }

    #[test]
    fn an_unknown_kernel_axis_or_value_is_refused() {
        let err = |k: &str, c: &[(&str, &str)]| variant(k, &choice(c)).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(err("baseline", &[("precision", "fp8")]), "kernel 'baseline': precision 'fp8' is not one of fp32, fp16, fp16-exact");
        assert_eq!(err("l2_probe", &[("layout", "rows")]), "kernel 'l2_probe' has no axis 'layout' (its axes: none)");
        assert!(err("nothing", &[]).starts_with("no kernel 'nothing'; the kernels are baseline, "));
        // Twin: the same axes with known values are found.
        assert!(variant("baseline", &choice(&[("precision", "fp32")])).is_ok());
    }
}
