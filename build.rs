//! Compiles the shipped shaders to SPIR-V at build time and embeds them, with
//! their GLSL sources, defines and includes, as `u32` arrays (no unaligned
//! reinterpretation of bytes at run time).
//!
//! A kernel is one `shaders/NAME.comp`. If `shaders/NAME.variants` exists, each
//! of its lines `variant DEFINE=VALUE ...` is compiled as one shipped shader
//! (ggml's table of variants); otherwise the file ships once, as `NAME`.
//!
//! Without the `gpu` feature (the fuzz targets) there is nothing to compile.

#[cfg(feature = "gpu")]
use std::fmt::Write as _;

#[cfg(feature = "gpu")]
#[path = "src/shader_options.rs"]
mod shader_options;
#[cfg(feature = "gpu")]
use std::path::{Path, PathBuf};

#[cfg(not(feature = "gpu"))]
fn main() {
    // Without this line cargo would rerun the script on any change in the package.
    println!("cargo:rerun-if-changed=build.rs");
}

/// (variant name, defines) from a `.variants` table.
#[cfg(feature = "gpu")]
fn read_variants(path: &Path) -> Vec<(String, Vec<(String, String)>)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default().to_string();
        let defines = words
            .map(|w| {
                let (k, v) = w.split_once('=').unwrap_or_else(|| {
                    panic!("{}:{}: '{w}' is not DEFINE=VALUE", path.display(), number + 1)
                });
                (k.to_string(), v.to_string())
            })
            .collect();
        out.push((name, defines));
    }
    out
}

#[cfg(feature = "gpu")]
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
        let table = path.with_extension("variants");
        if table.exists() {
            println!("cargo:rerun-if-changed={}", table.display());
            for (name, defines) in read_variants(&table) {
                variants.push((name, path.clone(), defines));
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

#[cfg(feature = "gpu")]
fn compile(
    compiler: &shaderc::Compiler,
    source: &str,
    path: &Path,
    includes: &Path,
    defines: &[(String, String)],
) -> Vec<u32> {
    let defines: Vec<(String, Option<String>)> = defines.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
    let includes = includes.to_path_buf();
    let options = shader_options::compile_options(&defines, move |name| {
        let file = includes.join(name);
        std::fs::read_to_string(&file)
            .map(|content| (file.display().to_string(), content))
            .map_err(|e| format!("{}: {e}", file.display()))
    })
    .expect("shaderc options");
    let name = path.display().to_string();
    match compiler.compile_into_spirv(source, shaderc::ShaderKind::Compute, &name, "main", Some(&options)) {
        Ok(artifact) => artifact.as_binary().to_vec(),
        Err(e) => panic!("shader {name} failed to compile:\n{e}"),
    }
}
