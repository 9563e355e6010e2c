//! How keys and values are written on the command line and printed.
//!
//! Input: an argument starting with `0x` is hex (`0x` alone is the empty string); anything else
//! is taken as its UTF-8 bytes. Output: bytes that are valid UTF-8 made of printable characters
//! (no control characters, so no tab or newline) and not starting with `0x` are printed as text;
//! anything else is printed as `0x` followed by lowercase hex, so the output always reads back.

/// Parses a command-line key or value.
pub fn parse_arg(s: &str) -> Result<Vec<u8>, String> {
    let Some(hex) = s.strip_prefix("0x") else {
        return Ok(s.as_bytes().to_vec());
    };
    if hex.len() % 2 != 0 {
        return Err(format!(
            "{s:?}: hex input after 0x needs an even number of digits"
        ));
    }
    let digit = |c: u8| -> Result<u8, String> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!(
                "{s:?}: {:?} is not a hex digit (input starting with 0x is hex)",
                c as char
            )),
        }
    };
    hex.as_bytes()
        .chunks(2)
        .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// Whether `b` prints as text.
pub fn is_printable(b: &[u8]) -> bool {
    match std::str::from_utf8(b) {
        Ok(s) => !s.starts_with("0x") && !s.chars().any(char::is_control),
        Err(_) => false,
    }
}

/// Lowercase hex with a `0x` prefix.
pub fn to_hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * b.len());
    s.push_str("0x");
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// Formats bytes for output: text when printable, else hex.
pub fn display(b: &[u8]) -> String {
    if is_printable(b) {
        String::from_utf8_lossy(b).into_owned()
    } else {
        to_hex(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for b in [
            &b"hello"[..],
            b"",
            b"a\tb",
            b"\x00\xff",
            b"0xabc",
            "h\u{e9}".as_bytes(),
            b"\n",
        ] {
            assert_eq!(parse_arg(&display(b)).unwrap(), b);
        }
        assert_eq!(display(b"hello world"), "hello world");
        assert_eq!(display(b"\x00\xff"), "0x00ff");
        assert_eq!(display(b"0x1"), "0x307831");
    }

    #[test]
    fn parses_hex() {
        assert_eq!(
            parse_arg("0xDEadbe01").unwrap(),
            vec![0xde, 0xad, 0xbe, 0x01]
        );
        assert_eq!(parse_arg("0x").unwrap(), Vec::<u8>::new());
        assert_eq!(parse_arg("x0").unwrap(), b"x0".to_vec());
        assert!(parse_arg("0xabc").unwrap_err().contains("even"));
        assert!(parse_arg("0xzz").unwrap_err().contains("hex digit"));
    }
}
