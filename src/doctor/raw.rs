//! Reading the app's JSON without decoding it into a tree: a message's
//! members, a result's list and each item are borrowed slices of the line
//! (`serde_json`'s `RawValue`), so a 15 MiB page costs the line, not a
//! gigabyte of maps, and only bounded pieces of it (names, quotes) are
//! kept.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

/// Most bytes of one name (or server name, version, capability) kept.
pub(super) const NAME_BYTES: usize = 200;

/// Most bytes of a bad line quoted in a warning.
const QUOTE_LIMIT: usize = 200;

/// The members of a JSON object, each a slice of `json`; `None` if it is
/// not one.
pub(super) fn members(json: &str) -> Option<BTreeMap<String, &RawValue>> {
    serde_json::from_str(json).ok()
}

/// A string member, cut to [`NAME_BYTES`]; empty if absent or not a
/// string.
pub(super) fn text_member(members: &BTreeMap<String, &RawValue>, key: &str) -> String {
    members
        .get(key)
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        .map_or_else(String::new, |text| cut(&text, NAME_BYTES))
}

/// Calls `each` with every element of the JSON array `array` (already
/// checked to be valid JSON), as a slice of it, without collecting them:
/// a page of a million items costs no more than its text. Returns `false`
/// if `array` is not an array.
pub(super) fn for_each_element(array: &str, mut each: impl FnMut(&str)) -> bool {
    crate::envelope::for_each_array_element(array.as_bytes(), &mut |element| {
        // Cut at ASCII delimiters and blanks, so still UTF-8.
        if let Ok(element) = std::str::from_utf8(element) {
            each(element);
        }
    })
}

/// How deeply arrays and objects nest in `json` (already checked to be
/// valid JSON): 0 for a number or a string, 1 for `[]` or `{"a":1}`, 2 for
/// `[[]]`. Read byte by byte, without recursion, so a 100,000-deep value
/// costs its length and no stack.
pub(super) fn nesting_depth(json: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    crate::envelope::for_each_outside_strings(json.as_bytes(), 0, |_, b| {
        match b {
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        true
    });
    deepest
}

/// The name (or URI) of a list item, cut to [`NAME_BYTES`].
pub(super) fn item_name(item: &str) -> String {
    let item = members(item).unwrap_or_default();
    let name = text_member(&item, "name");
    if !name.is_empty() {
        return name;
    }
    let uri = text_member(&item, "uri");
    if !uri.is_empty() {
        return uri;
    }
    "(unnamed)".into()
}

/// `text` cut to at most `limit` bytes (at a character boundary), with
/// `…` when cut.
pub(super) fn cut(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// A line quoted in a message: lossy UTF-8, trimmed, cut at
/// [`QUOTE_LIMIT`] bytes.
pub(super) fn quote(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(QUOTE_LIMIT)]);
    let mut text = text.trim_end().to_string();
    if line.len() > QUOTE_LIMIT {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elements(array: &str) -> Option<Vec<String>> {
        let mut found = Vec::new();
        let is_array = for_each_element(array, |e| found.push(e.to_string()));
        is_array.then_some(found)
    }

    #[test]
    fn elements_are_split_at_top_level_commas_only() {
        assert_eq!(elements("[]"), Some(vec![]));
        assert_eq!(elements("[ ]"), Some(vec![]));
        assert_eq!(
            elements(r#"[{"name":"a,]"}, [1,2] ,"x\"]",3]"#),
            Some(vec![
                r#"{"name":"a,]"}"#.to_string(),
                "[1,2]".into(),
                r#""x\"]""#.into(),
                "3".into()
            ])
        );
        assert_eq!(elements(r#"{"a":1}"#), None);
        assert_eq!(elements(""), None);
    }

    #[test]
    fn nesting_is_counted_outside_strings_only() {
        assert_eq!(nesting_depth("3"), 0);
        assert_eq!(nesting_depth(r#""[[{""#), 0);
        assert_eq!(nesting_depth(r#"{"a":[1,{"b":"\"]}"}],"c":[]}"#), 3);
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(nesting_depth(&deep), 100_000);
    }

    #[test]
    fn items_are_named_by_name_or_uri_and_cut() {
        assert_eq!(item_name(r#"{"name":"echo"}"#), "echo");
        assert_eq!(item_name(r#"{"uri":"file:///a"}"#), "file:///a");
        assert_eq!(item_name(r#"{"name":3}"#), "(unnamed)");
        let long = format!(r#"{{"name":"{}"}}"#, "é".repeat(300));
        let name = item_name(&long);
        assert!(name.len() <= NAME_BYTES + "…".len(), "{}", name.len());
        assert!(name.ends_with('…'));
    }
}
