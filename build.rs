//! Compiles the shipped shaders to SPIR-V at build time and embeds them, with
//! their GLSL sources, defines and includes, as `u32` arrays (no unaligned
//! reinterpretation of bytes at run time).
//!
//! `scan.comp` holds every shape and precision of the job; each variant is one
//! set of defines (VARIANTS). Every other `shaders/*.comp` is shipped as is.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const SHAPES: &[(&str, &str)] =
    &[("baseline", "SHAPE_BASELINE"), ("tiled", "SHAPE_TILED"), ("tile-dispatch", "SHAPE_TILE_DISPATCH")];
const PRECISIONS: &[(&str, &[&str])] =
    &[("", &[]), ("-fp16", &["DIVGPU_FP16"]), ("-fp16-exact", &["DIVGPU_FP16_EXACT"])];
const LAYOUTS: &[(&str, &[&str])] = &[("", &[]), ("-columns", &["DIVGPU_COLUMNS"])];

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let shaders = root.join("shaders");
    let includes = shaders.join("include");
    println!("cargo:rerun-if-changed={}", shaders.display());
    println!("cargo:rerun-if-changed={}", includes.display());

    let mut sources: Vec<PathBuf> = std::fs::read_dir(&shaders)
        .expect("read shaders/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "comp"))
        .collect();
    sources.sort();
    let mut include_files: Vec<PathBuf> = std::fs::read_dir(&includes)
        .expect("read shaders/include/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "glsl"))
        .collect();
    include_files.sort();

    let compiler = shaderc::Compiler::new().expect("shaderc compiler");
    let mut out = String::new();
    // (name, file, defines)
    let mut variants: Vec<(String, PathBuf, Vec<(String, String)>)> = Vec::new();
    for path in &sources {
        println!("cargo:rerun-if-changed={}", path.display());
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if stem == "scan" {
            for (shape, shape_define) in SHAPES {
                for (suffix, flags) in PRECISIONS {
                    for (layout, layout_flags) in LAYOUTS {
                        let mut defines = vec![("SHAPE".to_string(), shape_define.to_string())];
                        defines.extend(flags.iter().chain(layout_flags.iter()).map(|f| (f.to_string(), "1".to_string())));
                        variants.push((format!("{shape}{suffix}{layout}"), path.clone(), defines));
                    }
                }
            }
        } else {
            variants.push((stem, path.clone(), Vec::new()));
        }
    }
    writeln!(out, "/// Shipped shaders: (name, GLSL source, defines, SPIR-V words).").unwrap();
    writeln!(out, "pub const SHIPPED: &[(&str, &str, &[(&str, &str)], &[u32])] = &[").unwrap();
    for (name, path, defines) in &variants {
        let source = std::fs::read_to_string(path).expect("read shader");
        let words = compile(&compiler, &source, path, &includes, defines);
        write!(out, "    ({name:?}, {source:?}, &{defines:?}, &[").unwrap();
        for w in &words {
            write!(out, "{w},").unwrap();
        }
        writeln!(out, "]),").unwrap();
    }
    writeln!(out, "];").unwrap();
    writeln!(out, "/// Shipped include files: (name, GLSL source).").unwrap();
    writeln!(out, "pub const INCLUDES: &[(&str, &str)] = &[").unwrap();
    for path in &include_files {
        println!("cargo:rerun-if-changed={}", path.display());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(path).expect("read include");
        writeln!(out, "    ({name:?}, {source:?}),").unwrap();
    }
    writeln!(out, "];").unwrap();
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("shaders.rs");
    std::fs::write(dest, out).expect("write shaders.rs");
}

fn compile(
    compiler: &shaderc::Compiler,
    source: &str,
    path: &Path,
    includes: &Path,
    defines: &[(String, String)],
) -> Vec<u32> {
    let mut options = shaderc::CompileOptions::new().expect("shaderc options");
    for (k, v) in defines {
        options.add_macro_definition(k, Some(v));
    }
    options.set_target_env(shaderc::TargetEnv::Vulkan, shaderc::EnvVersion::Vulkan1_2 as u32);
    options.set_optimization_level(shaderc::OptimizationLevel::Zero);
    let includes = includes.to_path_buf();
    options.set_include_callback(move |name, _, _, _| {
        let file = includes.join(name);
        std::fs::read_to_string(&file)
            .map(|content| shaderc::ResolvedInclude { resolved_name: file.display().to_string(), content })
            .map_err(|e| format!("{}: {e}", file.display()))
    });
    let name = path.display().to_string();
    match compiler.compile_into_spirv(source, shaderc::ShaderKind::Compute, &name, "main", Some(&options)) {
        Ok(artifact) => artifact.as_binary().to_vec(),
        Err(e) => panic!("shader {name} failed to compile:\n{e}"),
    }
}
