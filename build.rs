//! Compiles the shipped shaders to SPIR-V at build time and embeds them, with
//! their GLSL sources, defines and includes, as `u32` arrays (no unaligned
//! reinterpretation of bytes at run time).
//!
//! A kernel is one `shaders/NAME.comp`. Its variant axes, if it has any, are
//! declared once in `shaders/NAME.axes.json` (each axis a list of values, the
//! first its default, each value with the defines it adds): every
//! combination of values is compiled as one shipped shader, named NAME plus
//! `-VALUE` for each value that is not its axis's default (`baseline`,
//! `baseline-fp16-exact-columns`). Without the file the kernel ships once,
//! as `NAME`. The axes are embedded too, so Lua picks a variant by its axis
//! values (`src/shaders.rs`) and never by spelling its name.
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

/// `shaders/NAME.axes.json`: what it says, and its axes in order.
#[cfg(feature = "gpu")]
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AxesFile {
    #[allow(dead_code)] // for the reader of the file
    about: String,
    axes: Vec<Axis>,
}

#[cfg(feature = "gpu")]
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Axis {
    axis: String,
    /// The first is the default: it adds nothing to the variant's name.
    values: Vec<AxisValue>,
}

#[cfg(feature = "gpu")]
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AxisValue {
    value: String,
    #[serde(default)]
    defines: std::collections::BTreeMap<String, String>,
}

/// One shipped shader: its name, its axis values in the axes' order, its defines.
#[cfg(feature = "gpu")]
struct Variant {
    name: String,
    choice: Vec<(String, String)>,
    defines: Vec<(String, String)>,
}

#[cfg(feature = "gpu")]
fn read_axes(path: &Path) -> Vec<Axis> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file: AxesFile = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for (i, axis) in file.axes.iter().enumerate() {
        let clash = file.axes[..i].iter().any(|a| a.axis == axis.axis);
        let bad_value = axis.values.iter().enumerate().find(|(j, v)| {
            v.value.is_empty() || axis.values[..*j].iter().any(|w| w.value == v.value)
        });
        if clash || axis.values.is_empty() || bad_value.is_some() || axis.axis.is_empty() {
            panic!("{}: axis '{}' is named twice, empty, or has an empty or repeated value", path.display(), axis.axis);
        }
    }
    file.axes
}

/// Every combination of the axes' values, the first axis outermost.
#[cfg(feature = "gpu")]
fn variants_of(kernel: &str, axes: &[Axis]) -> Vec<Variant> {
    let mut out = vec![Variant { name: kernel.to_string(), choice: Vec::new(), defines: Vec::new() }];
    for axis in axes {
        let mut next = Vec::new();
        for v in &out {
            for (i, value) in axis.values.iter().enumerate() {
                let name = if i == 0 { v.name.clone() } else { format!("{}-{}", v.name, value.value) };
                let mut choice = v.choice.clone();
                choice.push((axis.axis.clone(), value.value.clone()));
                let mut defines = v.defines.clone();
                defines.extend(value.defines.iter().map(|(k, x)| (k.clone(), x.clone())));
                next.push(Variant { name, choice, defines });
            }
        }
        out = next;
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
    writeln!(out, "/// The kernels and their variant axes (shaders/NAME.axes.json).").unwrap();
    writeln!(out, "pub const KERNELS: &[Kernel] = &[").unwrap();
    let mut shipped: Vec<(String, PathBuf, Variant)> = Vec::new();
    for path in &sources {
        println!("cargo:rerun-if-changed={}", path.display());
        let kernel = path.file_stem().unwrap().to_string_lossy().into_owned();
        let table = shaders.join(format!("{kernel}.axes.json"));
        let axes = if table.exists() {
            println!("cargo:rerun-if-changed={}", table.display());
            read_axes(&table)
        } else {
            Vec::new()
        };
        write!(out, "    Kernel {{ name: {kernel:?}, axes: &[").unwrap();
        for axis in &axes {
            let values: Vec<&str> = axis.values.iter().map(|v| v.value.as_str()).collect();
            write!(out, "Axis {{ name: {:?}, values: &{values:?} }}, ", axis.axis).unwrap();
        }
        writeln!(out, "] }},").unwrap();
        for variant in variants_of(&kernel, &axes) {
            shipped.push((kernel.clone(), path.clone(), variant));
        }
    }
    writeln!(out, "];").unwrap();
    writeln!(out, "/// The shipped shaders: every variant of every kernel, compiled.").unwrap();
    writeln!(out, "pub const SHIPPED: &[Shipped] = &[").unwrap();
    let mut not_built: Vec<(String, String)> = Vec::new();
    for (kernel, path, v) in &shipped {
        let source = std::fs::read_to_string(path).expect("read shader");
        let words = match compile(&compiler, &source, path, &includes, &v.defines) {
            Ok(words) => words,
            Err(why) => {
                not_built.push((v.name.clone(), why));
                continue;
            }
        };
        write!(
            out,
            "    Shipped {{ name: {:?}, kernel: {kernel:?}, choice: &{:?}, source: {source:?}, defines: &{:?}, spirv: &[",
            v.name, v.choice, v.defines
        )
        .unwrap();
        for w in &words {
            write!(out, "{w},").unwrap();
        }
        writeln!(out, "] }},").unwrap();
    }
    writeln!(out, "];").unwrap();
    writeln!(out, "/// Variants this build's compiler could not build: (name, why).").unwrap();
    writeln!(out, "pub const NOT_BUILT: &[(&str, &str)] = &{not_built:?};").unwrap();
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
) -> Result<Vec<u32>, String> {
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
        Ok(artifact) => Ok(artifact.as_binary().to_vec()),
        Err(e) => missing_extension(&e.to_string()).map_or_else(
            || panic!("shader {name} failed to compile:\n{e}"),
            |ext| {
                // Debian 12's shaderc (2023.2) predates GL_KHR_cooperative_matrix: a
                // kernel only such a GPU runs is left out, loudly, not the build.
                println!("cargo:warning=divgpu: {name} not built: this shaderc lacks {ext} (build shaderc from source: make build SHADERC=source)");
                Err(format!("this build's shaderc lacks {ext}; build with `make build SHADERC=source`"))
            },
        ),
    }
}

/// The extension an error says the compiler does not support, if that is all it says.
#[cfg(feature = "gpu")]
fn missing_extension(error: &str) -> Option<String> {
    let marker = "'#extension' : extension not supported: ";
    let at = error.find(marker)? + marker.len();
    Some(error[at..].split_whitespace().next()?.to_string())
}
