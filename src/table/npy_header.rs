//! The header of a NumPy `.npy` file, formats 1.0, 2.0 and 3.0: the magic
//! `\x93NUMPY`, the version, the length of the header text (u16 in 1.0, u32
//! after), then the text, a Python dict literal padded with spaces and a
//! newline: `{'descr': '<f4', 'fortran_order': False, 'shape': (N, D), }`.
//!
//! Read and written here by hand, not by a crate: npyz and ndarray-npy parse
//! the text with a general Python-literal grammar (py_literal, on pest) that
//! backtracks exponentially on nested brackets (14 nested `{` took 76 s, 16
//! nested `[` 1.2 s, four times longer per level), and npyz's shape product
//! overflows (a panic where overflow checks are on): both found by fuzzing
//! divgpu's reader. This parser takes what numpy writes for an array of plain
//! dtype (strings, True/False, a tuple of integers; no nesting), in one pass
//! whatever the bytes, and refuses everything else with what it found.

/// The first bytes of every `.npy` file.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// What a header says: the dtype string, the order and the shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub descr: String,
    pub fortran_order: bool,
    pub shape: Vec<u64>,
}

/// The size of the length field after the magic and a version (major,
/// minor), or why the version is not read.
pub fn length_field_size(major: u8, minor: u8) -> Result<usize, String> {
    match (major, minor) {
        (1, 0) => Ok(2),
        (2, 0) | (3, 0) => Ok(4),
        _ => Err(format!("format version {major}.{minor} is not read (1.0, 2.0 and 3.0 are)")),
    }
}

/// A whole header (magic to newline) for a C-order float32 array of `shape`:
/// version 1.0, text padded so the data starts at a multiple of 64 bytes, as
/// numpy writes it.
pub fn format(shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let tuple = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut text = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {tuple}, }}").into_bytes();
    let wide = text.len() + 1 + 10 > usize::from(u16::MAX);
    let before_text = if wide { 12 } else { 10 };
    while (before_text + text.len() + 1) % 64 != 0 {
        text.push(b' ');
    }
    text.push(b'\n');
    let mut out = MAGIC.to_vec();
    if wide {
        out.extend([2, 0]);
        out.extend((text.len() as u32).to_le_bytes());
    } else {
        out.extend([1, 0]);
        out.extend((text.len() as u16).to_le_bytes());
    }
    out.extend(text);
    out
}

/// Parses the header text (the dict and its padding).
pub fn parse(text: &[u8]) -> Result<Header, String> {
    let mut p = Cursor { text, at: 0 };
    p.expect(b'{')?;
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    while p.peek() != Some(b'}') {
        let key = p.string()?;
        p.expect(b':')?;
        match key.as_str() {
            "descr" => set(&mut descr, &key, p.descr()?)?,
            "fortran_order" => set(&mut fortran_order, &key, p.boolean()?)?,
            "shape" => set(&mut shape, &key, p.shape()?)?,
            _ => return Err(format!("the header has a key {key:?} (only 'descr', 'fortran_order' and 'shape' are read)")),
        }
        if p.peek() == Some(b',') {
            p.at += 1;
        } else if p.peek() != Some(b'}') {
            return Err(p.unexpected("',' or '}'"));
        }
    }
    p.at += 1;
    if p.peek().is_some() {
        return Err(p.unexpected("only padding after the header's dict"));
    }
    let missing = |name: &str| format!("the header has no '{name}'");
    Ok(Header {
        descr: descr.ok_or_else(|| missing("descr"))?,
        fortran_order: fortran_order.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
    })
}

fn set<T>(slot: &mut Option<T>, key: &str, value: T) -> Result<(), String> {
    if slot.replace(value).is_some() {
        return Err(format!("the header gives {key:?} twice"));
    }
    Ok(())
}

/// The header text and how far it has been read.
struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    /// The next byte that is not white space, without taking it.
    fn peek(&mut self) -> Option<u8> {
        while self.text.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
        self.text.get(self.at).copied()
    }

    fn unexpected(&mut self, wanted: &str) -> String {
        match self.peek() {
            // {:?} of a char: a control byte stays escaped, on one line.
            Some(b) => format!("byte {} of the header text is {:?}, where {wanted} was expected", self.at, char::from(b)),
            None => format!("the header text ends where {wanted} was expected"),
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.peek() != Some(byte) {
            return Err(self.unexpected(&format!("{:?}", char::from(byte))));
        }
        self.at += 1;
        Ok(())
    }

    /// A quoted string without escapes ('<f4', 'shape', "descr").
    fn string(&mut self) -> Result<String, String> {
        let quote = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.unexpected("a quoted string")),
        };
        let start = self.at + 1;
        let len = self.text[start..].iter().position(|&b| b == quote || b == b'\\' || b == b'\n');
        match len.map(|len| (len, self.text[start + len])) {
            Some((len, b)) if b == quote => {
                self.at = start + len + 1;
                String::from_utf8(self.text[start..start + len].to_vec()).map_err(|_| "a header string is not UTF-8".into())
            }
            _ => Err(format!("the string at byte {} of the header text is not closed (or has an escape)", self.at)),
        }
    }

    fn descr(&mut self) -> Result<String, String> {
        if self.peek() == Some(b'[') {
            return Err("values are a structured dtype (a list of fields): only float32 ('<f4') tables are read".into());
        }
        self.string()
    }

    fn boolean(&mut self) -> Result<bool, String> {
        for (word, value) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.peek().is_some() && self.text[self.at..].starts_with(word) {
                self.at += word.len();
                return Ok(value);
            }
        }
        Err(self.unexpected("True or False"))
    }

    /// A tuple of non-negative integers: `()`, `(3,)`, `(3, 2)`, `(3, 2,)`;
    /// an `L` after a number (Python 2's long) is taken.
    fn shape(&mut self) -> Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        while self.peek() != Some(b')') {
            dims.push(self.integer()?);
            if self.peek() == Some(b',') {
                self.at += 1;
            } else if self.peek() != Some(b')') {
                return Err(self.unexpected("',' or ')' in the shape"));
            }
        }
        self.at += 1;
        Ok(dims)
    }

    fn integer(&mut self) -> Result<u64, String> {
        let start = self.at;
        let digits = match self.peek() {
            Some(b'0'..=b'9') => self.text[self.at..].iter().take_while(|b| b.is_ascii_digit()).count(),
            _ => return Err(self.unexpected("a non-negative integer in the shape")),
        };
        let text = &self.text[self.at..self.at + digits];
        self.at += digits;
        if matches!(self.text.get(self.at), Some(b'L' | b'l')) {
            self.at += 1;
        }
        text.iter()
            .try_fold(0u64, |v, &d| v.checked_mul(10)?.checked_add(u64::from(d - b'0')))
            .ok_or_else(|| format!("the shape value at byte {start} of the header text is over 2^64"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(shape: &[u64]) -> Header {
        Header { descr: "<f4".into(), fortran_order: false, shape: shape.to_vec() }
    }

    #[test]
    fn numpys_forms_are_read() {
        let ok = |text: &str| parse(text.as_bytes());
        assert_eq!(ok("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }          \n"), Ok(header(&[3, 2])));
        assert_eq!(ok("{'shape': (3, 2), 'fortran_order': False, 'descr': '<f4'}"), Ok(header(&[3, 2])));
        assert_eq!(ok("{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(3L,2L,)}\n"), Ok(header(&[3, 2])));
        assert_eq!(ok("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }"), Ok(header(&[6])));
        assert_eq!(ok("{'descr': '<f4', 'fortran_order': False, 'shape': (), }"), Ok(header(&[])));
        let t = ok("{'descr': '|O', 'fortran_order': True, 'shape': (18446744073709551615, 0), }").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((t.descr.as_str(), t.fortran_order, t.shape), ("|O", true, vec![u64::MAX, 0]));
    }

    #[test]
    fn anything_else_is_refused_saying_what_was_found() {
        let err = |text: &str| parse(text.as_bytes()).err().unwrap_or_else(|| panic!("accepted {text}"));
        let base = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";
        assert!(err(&base.replace("(3, 2)", "(18446744073709551616, 2)")).contains("over 2^64"));
        assert!(err(&base.replace("(3, 2)", "(3, -2)")).contains("a non-negative integer"));
        assert!(err(&base.replace("(3, 2)", "[3, 2]")).contains("'('"));
        assert!(err(&base.replace("False", "0")).contains("True or False"));
        assert!(err(&base.replace("'<f4'", "[('a', '<f4')]")).contains("structured dtype"));
        assert!(err(&base.replace("'<f4'", "'<f\\x34'")).contains("not closed (or has an escape)"));
        assert!(err(&base.replace("'shape'", "'shape2'")).contains("a key \"shape2\""));
        assert!(err(&format!("{base}x")).contains("only padding after"));
        assert!(err(&base.replace(", 'shape': (3, 2)", "")).contains("no 'shape'"));
        assert!(err(&base.replace("}", "'descr': '<f4'}")).contains("\"descr\" twice"));
        assert!(err("{'descr': '<f4'").contains("ends where"));
        assert!(err("").contains("ends where '{'"));
        assert!(err("{'descr'\n: '<f4\n'}").contains("not closed"));
        let e = err("{'descr': '<f4', \u{1}}");
        assert!(e.contains("'\\u{1}'") && !e.contains('\u{1}'), "{e}");
    }

    // The inputs that made a general literal parser backtrack for minutes
    // are refused at their first bracket here, at any depth.
    #[test]
    fn nested_brackets_are_refused_at_once() {
        for open in ["{", "[", "("] {
            let text = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {}1, }}", open.repeat(100_000));
            let t = std::time::Instant::now();
            assert!(parse(text.as_bytes()).is_err());
            assert!(t.elapsed().as_secs_f64() < 1.0, "{open}: {:?}", t.elapsed());
        }
    }

    #[test]
    fn format_writes_what_parse_reads_aligned_to_64() {
        for shape in [&[3u64, 2][..], &[1 << 40, 384], &[7]] {
            let bytes = format(shape);
            assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
            assert_eq!(bytes.len() % 64, 0);
            let len = usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
            assert_eq!(bytes.len(), 10 + len);
            assert_eq!(bytes.last(), Some(&b'\n'));
            assert_eq!(parse(&bytes[10..]), Ok(header(shape)));
        }
        assert!(format(&[3, 2])[10..].starts_with(b"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), } "));
    }
}
