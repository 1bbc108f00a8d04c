//! The project's one shaderc setup, shared by `build.rs` (the shipped
//! shaders, included there with `#[path]`) and run-time compilation
//! (`shaders.rs`): the Vulkan target, the optimisation level, the defines and
//! how `#include` is resolved. A shader compiled at run time with the shipped
//! defines therefore gives the shipped SPIR-V.

/// Compile options for `defines`; `resolve(name)` returns an include's
/// (resolved name, content) or why it could not be found.
pub fn compile_options<'a>(
    defines: &[(String, Option<String>)],
    resolve: impl Fn(&str) -> Result<(String, String), String> + 'a,
) -> Result<shaderc::CompileOptions<'a>, String> {
    let mut options =
        shaderc::CompileOptions::new().map_err(|e| format!("could not create shaderc options: {e}"))?;
    options.set_target_env(shaderc::TargetEnv::Vulkan, shaderc::EnvVersion::Vulkan1_2 as u32);
    // The driver's compiler optimises; glslang's optimiser adds nothing we
    // measured and must not reassociate the contract's `precise` chain.
    options.set_optimization_level(shaderc::OptimizationLevel::Zero);
    for (key, value) in defines {
        options.add_macro_definition(key, value.as_deref());
    }
    options.set_include_callback(move |name, _, _, _| {
        resolve(name).map(|(resolved_name, content)| shaderc::ResolvedInclude { resolved_name, content })
    });
    Ok(options)
}
