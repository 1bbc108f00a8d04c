use super::*;
use sha2::Sha256;
use crate::test_support::tmp;

/// A `.npy` file made by hand (so versions 2 and 3 and every refusal can
/// be written): the header dict padded to 64 bytes, then `values`.
fn npy_file(version: u8, dict: &str, values: &[u8]) -> Vec<u8> {
    let pre = if version == 1 { 10 } else { 12 };
    let mut text = dict.to_string();
    while (pre + text.len() + 1) % 64 != 0 {
        text.push(' ');
    }
    text.push('\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend([version, 0]);
    if version == 1 {
        out.extend((text.len() as u16).to_le_bytes());
    } else {
        out.extend((text.len() as u32).to_le_bytes());
    }
    out.extend(text.as_bytes());
    out.extend(values);
    out
}

fn dict(descr: &str, fortran: &str, shape: &str) -> String {
    format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}")
}

fn le(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|x| x.to_le_bytes()).collect()
}

const VALUES: [f32; 6] = [1.0, -0.5, 0.25, 3.0, 1e-40, -2.0];

fn good(version: u8) -> Vec<u8> {
    npy_file(version, &dict("<f4", "False", "(3, 2)"), &le(&VALUES))
}

fn err(bytes: &[u8]) -> String {
    match parse("t.npy", bytes, None) {
        Ok(t) => panic!("accepted a {}x{} table", t.n, t.dim),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("t.npy: ") && !msg.contains(['\n', '\r']), "{msg:?}");
            msg
        }
    }
}

#[test]
fn versions_1_2_and_3_read_the_same_values_and_hash_the_file() -> Result<()> {
    for version in [1, 2, 3] {
        let bytes = good(version);
        let t = parse("t.npy", &bytes, None)?;
        assert_eq!((t.n, t.dim), (3, 2));
        assert_eq!(t.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), VALUES.map(f32::to_bits).to_vec());
        assert_eq!(t.inv_norm[0], crate::contract::table::inv_norm_of(&VALUES[..2]));
        assert_eq!(t.sha256, hex(&Sha256::digest(&bytes)));
        assert!(t.titles.is_none() && t.ids.is_none() && t.model.is_none());
    }
    Ok(())
}

// Twin: one value changed is another table, with another sha256.
#[test]
fn one_value_changed_changes_the_sha256() -> Result<()> {
    let mut changed = VALUES;
    changed[3] = f32::from_bits(changed[3].to_bits() + 1);
    let a = parse("t.npy", &good(1), None)?;
    let b = parse("t.npy", &npy_file(1, &dict("<f4", "False", "(3, 2)"), &le(&changed)), None)?;
    assert_ne!(a.sha256, b.sha256);
    assert_ne!(a.data, b.data);
    Ok(())
}

#[test]
fn other_dtypes_orders_and_shapes_are_refused() {
    let v = le(&VALUES);
    assert!(err(&npy_file(1, &dict("<f8", "False", "(3, 1)"), &v)).contains("'<f8' (float64): only float32"));
    assert!(err(&npy_file(1, &dict(">f4", "False", "(3, 2)"), &v)).contains("big-endian"));
    assert!(err(&npy_file(1, &dict("<i4", "False", "(3, 2)"), &v)).contains("'<i4'"));
    assert!(err(&npy_file(1, &dict("<f4", "True", "(3, 2)"), &v)).contains("fortran_order is True"));
    assert!(err(&npy_file(1, &dict("<f4", "False", "(6,)"), &v)).contains("1 dimension(s)"));
    assert!(err(&npy_file(1, &dict("<f4", "False", "(1, 3, 2)"), &v)).contains("3 dimension(s)"));
}

#[test]
fn truncated_padded_and_foreign_files_are_refused() {
    let bytes = good(1);
    assert!(err(&bytes[..bytes.len() - 1]).contains("the file is truncated: shape (3, 2) needs 24 bytes"));
    assert!(err(&[&bytes[..], &[0]].concat()).contains("1 bytes follow"));
    assert!(err(&bytes[..20]).contains("truncated inside its header"));
    assert!(err(b"").contains("the file is empty"));
    assert!(err(b"[[1, 2], [3, 4]]").contains("not a .npy file (it does not start with the \\x93NUMPY magic)"));
    assert!(err(&good(1)[..8]).contains("truncated inside its header"));
    // Found by the fuzzer (npy target, in its first minute): a file of
    // fewer than 8 bytes sliced the header prefix past its end (a panic).
    assert!(err(&good(1)[..5]).contains("not a .npy file"));
    assert!(err(b"\0").contains("not a .npy file"));
    let mut v4 = good(2);
    v4[6] = 4;
    assert!(err(&v4).contains("format version 4.0 is not read (1.0, 2.0 and 3.0 are)"));
    let mut garbled = good(1);
    garbled[20] = b'?';
    assert!(err(&garbled).contains("not a readable .npy header: byte 10 of the header text is '?'"));
    // A header that states 4 GiB of text in a 100-byte file: refused
    // before the text is allocated.
    let mut huge = good(2);
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(err(&huge).contains("truncated inside its header"));
    // A shape of 2^40 rows in a small file: refused on the size, before
    // the values are allocated.
    assert!(err(&npy_file(1, &dict("<f4", "False", "(1099511627776, 384)"), &[])).contains("is truncated"));
    assert!(err(&npy_file(1, &dict("<f4", "False", "(18446744073709551615, 2)"), &[])).contains("does not fit"));
}

#[test]
fn bad_values_are_refused_with_the_json_loaders_messages() {
    let file = |values: &[f32], shape: &str| npy_file(1, &dict("<f4", "False", shape), &le(values));
    assert!(err(&file(&[1.0, 2.0, 3.0, f32::NAN], "(2, 2)")).ends_with("row 1, column 1: value is not finite"));
    assert!(err(&file(&[1.0, f32::INFINITY, 3.0, 1.0], "(2, 2)")).ends_with("row 0, column 1: value is not finite"));
    assert!(err(&file(&[1.0, 2.0, 0.0, -0.0], "(2, 2)")).contains("row 1 is all zeros"));
    assert!(err(&file(&[1.0, 2.0], "(1, 2)")).contains("at least 2 are needed"));
    assert!(err(&file(&[], "(2, 0)")).contains("dimension 0"));
    assert!(err(&file(&[1.0, 3e38], "(2, 1)")).contains("could overflow f32"));
    // The same rules as embeddings.json.
    let json = Table::parse_json("t.npy", b"[[1, 2], [0, 0]]").err().map(|e| e.to_string());
    assert_eq!(json, Some(err(&file(&[1.0, 2.0, 0.0, 0.0], "(2, 2)"))));
}

/// Rows of `dim` values, row j = (j + 1, 1, 1, ...): enough rows for
/// several pieces of CHUNK_BYTES.
fn many_rows(n: usize, dim: usize) -> Vec<f32> {
    (0..n * dim).map(|i| if i % dim == 0 { (i / dim + 1) as f32 } else { 1.0 }).collect()
}

#[test]
fn a_bad_row_in_a_later_piece_is_named_by_its_row_in_the_file() -> Result<()> {
    let (n, dim) = (8000, 384); // 12 MB: three pieces
    let mut values = many_rows(n, dim);
    let shape = format!("({n}, {dim})");
    let t = parse("t.npy", &npy_file(1, &dict("<f4", "False", &shape), &le(&values)), None)?;
    assert_eq!(t.data, values);
    assert_eq!(t.inv_norm.len(), n);
    assert_eq!(t.inv_norm[7777], crate::contract::table::inv_norm_of(&values[7777 * dim..7778 * dim]));
    // Twin: the same table with one value broken late in the file.
    values[6543 * dim + 17] = f32::NAN;
    let e = err(&npy_file(1, &dict("<f4", "False", &shape), &le(&values)));
    assert!(e.ends_with("row 6543, column 17: value is not finite"), "{e}");
    Ok(())
}

#[test]
fn the_sidecar_gives_titles_ids_and_model() -> Result<()> {
    let side = br#"{"model": "m", "ids": [7, "b", 2.5], "titles": ["x", "y", "z"], "texts": ["ignored"]}"#;
    let t = parse("t.npy", &good(1), Some(side))?;
    assert_eq!(t.model.as_deref(), Some("m"));
    assert_eq!(t.ids, Some(vec!["7".to_string(), "b".to_string(), "2.5".to_string()]));
    assert_eq!(t.titles, Some(vec!["x".to_string(), "y".to_string(), "z".to_string()]));
    Ok(())
}

#[test]
fn a_wrong_sidecar_is_refused_naming_it() {
    let side_err = |side: &str| match parse("d/t.npy", &good(1), Some(side.as_bytes())) {
        Ok(_) => panic!("accepted sidecar {side}"),
        Err(e) => e.to_string(),
    };
    let e = side_err(r#"{"titles": ["x", "y"]}"#);
    assert_eq!(e, "d/t.titles.json: \"titles\" has 2 entries but there are 3 rows");
    assert!(side_err(r#"{"ids": [1, 2, 3, 4]}"#).contains("\"ids\" has 4 entries"));
    assert!(side_err(r#"["x", "y", "z"]"#).starts_with("d/t.titles.json: not a titles file for d/t.npy"));
    assert!(side_err(r#"{"titles": ["x", "y", 3]}"#).starts_with("d/t.titles.json: not a titles file"));
    let e = side_err(r#"{"embeddings_sha256": "00\r11", "titles": ["x", "y", "z"]}"#);
    assert!(e.starts_with("d/t.titles.json: made for another .npy") && !e.contains('\r'), "{e:?}");
    // Twin: the sidecar of this very file is taken.
    let sha = hex(&Sha256::digest(good(1)));
    let ok = format!(r#"{{"embeddings_sha256": "{sha}", "titles": ["x", "y", "z"]}}"#);
    assert!(parse("d/t.npy", &good(1), Some(ok.as_bytes())).is_ok());
}

fn fixture(name: &str) -> String {
    format!("{}/tests/data/npy/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The files numpy wrote (tests/data/npy/make_fixtures.py).
#[test]
fn numpys_files_read_as_the_json_form_of_the_table() -> Result<()> {
    let json = Table::load_json(&fixture("table.json"))?;
    for name in ["table_v1.npy", "table_v2.npy", "table_v3.npy", "labelled.npy"] {
        let t = load(&fixture(name))?;
        assert_eq!((t.n, t.dim), (5, 3), "{name}");
        let bits = |t: &Table| t.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&t), bits(&json), "{name}");
        assert_eq!(t.inv_norm, json.inv_norm, "{name}");
        let bytes = std::fs::read(fixture(name)).map_err(|e| Error::io(name, e))?;
        assert_eq!(t.sha256, hex(&Sha256::digest(&bytes)));
    }
    // divgpu writes numpy's header byte for byte.
    let numpy = std::fs::read(fixture("table_v1.npy")).map_err(|e| Error::io("table_v1.npy", e))?;
    assert_eq!(npy_header::format(&[5, 3])[..], numpy[..128]);
    let t = load(&fixture("labelled.npy"))?;
    assert_eq!(t.ids.as_ref().map(|ids| ids[4].as_str()), Some("104"));
    assert_eq!(t.titles.as_ref().map(|t| t[0].as_str()), Some("one"));
    assert_eq!(t.model.as_deref(), Some("fixture"));
    Ok(())
}

#[test]
fn numpys_other_files_are_refused() {
    for (name, expected) in [
        ("float64.npy", "values are '<f8' (float64): only float32 ('<f4') tables are read"),
        ("bigendian.npy", "values are big-endian float32 ('>f4')"),
        ("int32.npy", "values are '<i4'"),
        ("object.npy", "values are '|O'"),
        ("fortran.npy", "fortran_order is True"),
        ("one_d.npy", "the array has 1 dimension(s), shape [3]"),
        ("nan.npy", "row 2, column 1: value is not finite"),
        ("zero_row.npy", "row 3 is all zeros"),
        ("truncated.npy", "the file is truncated: shape (5, 3) needs 60 bytes of values after the header, it has 56"),
    ] {
        let path = fixture(name);
        match load(&path) {
            Ok(_) => panic!("{name} was accepted"),
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.starts_with(&format!("{path}: {expected}")), "{name}: {msg}");
            }
        }
    }
}

#[test]
fn sidecar_names() {
    assert_eq!(sidecar_path("a/b/X.npy"), "a/b/X.titles.json");
    assert_eq!(sidecar_path("X.NPY"), "X.titles.json");
    assert_eq!(sidecar_path("é.npy"), "é.titles.json");
    assert_eq!(sidecar_path("X"), "X.titles.json");
}

#[test]
fn write_then_load_gives_the_same_table_and_the_files_sha256() -> Result<()> {
    let dir = tmp("npy", "roundtrip");
    let mut t = Table::from_rows("mem", 3, 2, VALUES.to_vec(), None)?;
    t.model = Some("m".into());
    t.titles = Some(vec!["a".into(), "b\n\"c\"".into(), "δ".into()]);
    t.ids = Some(vec!["1".into(), "x".into(), "3".into()]);
    let path = dir.join("t.npy").display().to_string();
    write(&t, &path)?;
    let back = load(&path)?;
    assert_eq!(back.data.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), VALUES.map(f32::to_bits).to_vec());
    assert_eq!((back.model, back.ids, back.titles), (t.model.clone(), t.ids.clone(), t.titles.clone()));
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    assert_eq!(back.sha256, hex(&Sha256::digest(&bytes)));
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    // No sidecar: no titles (a hand-made .npy).
    std::fs::remove_file(dir.join("t.titles.json")).map_err(|e| Error::io("sidecar", e))?;
    let bare = load(&path)?;
    assert!(bare.titles.is_none() && bare.model.is_none());
    Ok(())
}

// A sidecar left by an earlier table of the same size is replaced by the
// next write, and one that is stale (the .npy changed) is refused.
#[test]
fn a_stale_sidecar_is_refused() -> Result<()> {
    let dir = tmp("npy", "stale");
    let path = dir.join("t.npy").display().to_string();
    let mut t = Table::from_rows("mem", 3, 2, VALUES.to_vec(), None)?;
    t.titles = Some(vec!["a".into(), "b".into(), "c".into()]);
    write(&t, &path)?;
    let side = std::fs::read(sidecar_path(&path)).map_err(|e| Error::io("sidecar", e))?;
    let other = Table::from_rows("mem", 3, 2, VALUES.iter().map(|x| x * 2.0).collect(), None)?;
    write(&other, &path)?;
    assert!(load(&path)?.titles.is_none(), "the new write replaced the old sidecar");
    std::fs::write(sidecar_path(&path), &side).map_err(|e| Error::io("sidecar", e))?;
    let e = load(&path).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("t.titles.json: made for another .npy"), "{e}");
    Ok(())
}
