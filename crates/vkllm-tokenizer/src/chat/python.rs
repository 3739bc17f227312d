//! Python's spelling of values, as Jinja2 under transformers prints them: `str()` of values,
//! `repr()` inside containers, `json.dumps` for `tojson`, `str.strip` for `trim`.

use std::fmt::Write;

use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, Value};

/// Python's `repr(float)` (also what `json.dumps` writes for finite floats): the shortest
/// digits that round-trip, fixed notation for decimal exponents -4..16, else `d.ddde+XX`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        if point <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-point) as usize));
            out.push_str(&digits);
        } else if point as usize >= digits.len() {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', point as usize - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..point as usize]);
            out.push('.');
            out.push_str(&digits[point as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

/// Whether Python's `str.isspace()` holds for `c` (Unicode White_Space plus the four
/// information separators U+001C..U+001F, which Python counts and Rust does not).
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip(chars)` / `lstrip` / `rstrip`.
pub fn py_strip<'a>(s: &'a str, chars: Option<&str>, left: bool, right: bool) -> &'a str {
    let pred = |c: char| match chars {
        Some(set) => set.contains(c),
        None => py_isspace(c),
    };
    let mut s = s;
    if left {
        s = s.trim_start_matches(pred);
    }
    if right {
        s = s.trim_end_matches(pred);
    }
    s
}

/// Characters Python's `repr` escapes: `str.isprintable()` is false for them. Approximated by
/// the control, format, separator and private-use ranges (no full Unicode table here).
fn py_unprintable(c: char) -> bool {
    let u = c as u32;
    c.is_control()
        || matches!(u,
            0xa0 | 0xad | 0x1680 | 0x180e | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x206f
            | 0x3000 | 0xfeff | 0xfff9..=0xfffb | 0xe000..=0xf8ff | 0xe0000..=0xe007f
            | 0xf0000..=0x10ffff)
}

/// Python's `repr(str)`.
pub fn str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if py_unprintable(c) => {
                let u = c as u32;
                let _ = if u <= 0xff {
                    write!(out, "\\x{u:02x}")
                } else if u <= 0xffff {
                    write!(out, "\\u{u:04x}")
                } else {
                    write!(out, "\\U{u:08x}")
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's `str(value)` (`repr` = false) or `repr(value)` (`repr` = true) for template values.
pub fn py_format(value: &Value, repr: bool, out: &mut String) {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number if !value.is_integer() => match f64::try_from(value.clone()) {
            Ok(f) => out.push_str(&float_repr(f)),
            Err(_) => {
                let _ = write!(out, "{value}");
            }
        },
        ValueKind::String if repr => str_repr(value.as_str().unwrap_or_default(), out),
        ValueKind::Seq => {
            out.push('[');
            if let Ok(iter) = value.try_iter() {
                for (i, item) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_format(&item, true, out);
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(iter) = value.try_iter() {
                for (i, key) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_format(&key, true, out);
                    out.push_str(": ");
                    let item = value.get_item(&key).unwrap_or_default();
                    py_format(&item, true, out);
                }
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{value}");
        }
    }
}

/// How `tojson` lays its output out (Python's `json.dumps` arguments).
#[derive(Debug, Clone, Default)]
pub struct JsonStyle {
    pub ensure_ascii: bool,
    /// `None`: one line; `Some(s)`: one item a line, indented by `s` per level.
    pub indent: Option<String>,
    /// (item separator, key separator); defaults depend on `indent` as in Python.
    pub separators: Option<(String, String)>,
    pub sort_keys: bool,
}

/// Python's `json.dumps(value, ...)`.
pub fn json_dumps(value: &Value, style: &JsonStyle) -> Result<String, Error> {
    let (item_sep, key_sep) = match &style.separators {
        Some((i, k)) => (i.clone(), k.clone()),
        None if style.indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let mut out = String::new();
    dump(value, style, &item_sep, &key_sep, 0, &mut out)?;
    Ok(out)
}

fn newline_indent(style: &JsonStyle, level: usize, out: &mut String) {
    if let Some(ind) = &style.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn dump(
    value: &Value,
    style: &JsonStyle,
    item_sep: &str,
    key_sep: &str,
    level: usize,
    out: &mut String,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if value.is_integer() {
                let _ = write!(out, "{value}");
            } else {
                let f = f64::try_from(value.clone())?;
                if f.is_nan() {
                    out.push_str("NaN");
                } else if f.is_infinite() {
                    out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
                } else {
                    out.push_str(&float_repr(f));
                }
            }
        }
        ValueKind::String => json_string(value.as_str().unwrap_or_default(), style, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline_indent(style, level + 1, out);
                dump(item, style, item_sep, key_sep, level + 1, out)?;
            }
            newline_indent(style, level, out);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if style.sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline_indent(style, level + 1, out);
                let key_text = match key.kind() {
                    ValueKind::String => key.as_str().unwrap_or_default().to_string(),
                    ValueKind::None => "null".into(),
                    ValueKind::Bool => if key.is_true() { "true" } else { "false" }.into(),
                    ValueKind::Number => {
                        let mut s = String::new();
                        py_format(key, false, &mut s);
                        s
                    }
                    _ => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            format!(
                                "tojson: keys must be str, int, float, bool or None, not {key}"
                            ),
                        ));
                    }
                };
                json_string(&key_text, style, out);
                out.push_str(key_sep);
                dump(
                    &value.get_item(key)?,
                    style,
                    item_sep,
                    key_sep,
                    level + 1,
                    out,
                )?;
            }
            newline_indent(style, level, out);
            out.push('}');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "tojson: object of type {} is not JSON serializable",
                    value.kind()
                ),
            ));
        }
    }
    Ok(())
}

fn json_string(s: &str, style: &JsonStyle, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if style.ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `strftime` over UTC for the few directives chat templates use (`%d %b %Y` and the like).
pub fn strftime_utc(format: &str, unix_secs: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = unix_secs.div_euclid(86_400);
    let secs = unix_secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    // 1970-01-01 was a Thursday (index 3 with Monday = 0).
    let wd = (days + 3).rem_euclid(7) as usize;
    let yday = days - days_from_civil(y, 1, 1) + 1;
    let (hh, mm, ss) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('Y') => write!(out, "{y}"),
            Some('y') => write!(out, "{:02}", y.rem_euclid(100)),
            Some('m') => write!(out, "{m:02}"),
            Some('d') => write!(out, "{d:02}"),
            Some('-') if chars.clone().next() == Some('d') => {
                chars.next();
                write!(out, "{d}")
            }
            Some('B') => write!(out, "{}", MONTHS[m as usize - 1]),
            Some('b') => write!(out, "{}", &MONTHS[m as usize - 1][..3]),
            Some('A') => write!(out, "{}", DAYS[wd]),
            Some('a') => write!(out, "{}", &DAYS[wd][..3]),
            Some('j') => write!(out, "{yday:03}"),
            Some('H') => write!(out, "{hh:02}"),
            Some('M') => write!(out, "{mm:02}"),
            Some('S') => write!(out, "{ss:02}"),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        };
    }
    out
}

/// Days since 1970-01-01 -> (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        // Values and spellings from CPython's repr().
        for (f, want) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (100.0, "100.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (-2.5, "-2.5"),
            (2.5625, "2.5625"),
            (-0.0, "-0.0"),
            (1e100, "1e+100"),
            (2.5e-300, "2.5e-300"),
            (12345.678, "12345.678"),
        ] {
            assert_eq!(float_repr(f), want, "{f}");
        }
    }

    #[test]
    fn json_dumps_matches_python() {
        let v = crate::chat::to_value(serde_json::json!({
            "b": [1, 2.5, "x<y>&'z'", null, true],
            "a": {"é": "\u{1}\n\"", "e": []},
            "n": {}
        }));
        // json.dumps(v, ensure_ascii=False)
        assert_eq!(
            json_dumps(&v, &JsonStyle::default()).unwrap(),
            r#"{"b": [1, 2.5, "x<y>&'z'", null, true], "a": {"é": "\u0001\n\"", "e": []}, "n": {}}"#
        );
        // json.dumps(v, ensure_ascii=True, sort_keys=True, indent=2)
        let style = JsonStyle {
            ensure_ascii: true,
            indent: Some("  ".into()),
            separators: None,
            sort_keys: true,
        };
        assert_eq!(
            json_dumps(&v, &style).unwrap(),
            "{\n  \"a\": {\n    \"e\": [],\n    \"\\u00e9\": \"\\u0001\\n\\\"\"\n  },\n  \"b\": [\n    1,\n    2.5,\n    \"x<y>&'z'\",\n    null,\n    true\n  ],\n  \"n\": {}\n}"
        );
        // astral plane under ensure_ascii: surrogate pair
        let s = Value::from("😀");
        let style = JsonStyle {
            ensure_ascii: true,
            ..JsonStyle::default()
        };
        assert_eq!(json_dumps(&s, &style).unwrap(), r#""\ud83d\ude00""#);
    }

    #[test]
    fn py_format_matches_python_str() {
        let v = crate::chat::to_value(serde_json::json!({"a": [1, "it's", null, false, 0.5]}));
        let mut s = String::new();
        py_format(&v, false, &mut s);
        // str({'a': [1, "it's", None, False, 0.5]})
        assert_eq!(s, r#"{'a': [1, "it's", None, False, 0.5]}"#);
        let mut s = String::new();
        py_format(&Value::from("a\tb\u{0}"), true, &mut s);
        assert_eq!(s, r"'a\tb\x00'");
    }

    #[test]
    fn strip_follows_python_whitespace() {
        assert_eq!(py_strip("\u{1c} x \u{3000}\n", None, true, true), "x");
        assert_eq!(py_strip("xxaxx", Some("x"), true, false), "axx");
        assert_eq!(py_strip("xxaxx", Some("x"), false, true), "xxa");
    }

    #[test]
    fn strftime_known_dates() {
        // 2024-02-29T13:05:09Z was a Thursday, day 60 of the year.
        let t = 1_709_211_909;
        assert_eq!(
            strftime_utc("%d %b %Y %H:%M:%S %A %a %B %j %y %m %-d %%", t),
            "29 Feb 2024 13:05:09 Thursday Thu February 060 24 02 29 %"
        );
        assert_eq!(strftime_utc("%Y-%m-%d", 0), "1970-01-01");
        assert_eq!(strftime_utc("%Y-%m-%d", -86_400), "1969-12-31");
    }
}
