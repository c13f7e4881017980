//! The cache's own rules, through its interface, on real files.

use super::*;

fn dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mcp-bridge-cache-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn request(line: &str) -> Vec<u8> {
    line.as_bytes().to_vec()
}

fn initialize(version: &str) -> Vec<u8> {
    request(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"{}"}}}}"#,
        version
    ))
}

/// A cache of `/run/a.sock`, project `p`, served by our own user.
fn cache(dir: &Path) -> Cache {
    let mut cache = Cache::open(Some(dir), Path::new("/run/a.sock"), "p", None);
    cache.served_by(ServerUser::own().unwrap());
    cache
}

#[test]
fn answers_are_kept_per_endpoint_project_and_question() {
    let dir = dir();
    let result = br#"{"protocolVersion":"2025-06-18","capabilities":{}}"#;
    let mut first = cache(&dir);
    assert_eq!(first.answer(&initialize("2025-06-18")), None);
    first.learn(&initialize("2025-06-18"), Some(result));
    let mut again = cache(&dir);
    assert_eq!(
        again.answer(&initialize("2025-06-18")).as_deref(),
        Some(&result[..])
    );
    assert_eq!(again.answer(&initialize("2024-11-05")), None);
    let mut other = Cache::open(Some(&dir), Path::new("/run/a.sock"), "q", None);
    assert_eq!(other.answer(&initialize("2025-06-18")), None);
    let mut other = Cache::open(Some(&dir), Path::new("/run/b.sock"), "p", None);
    assert_eq!(other.answer(&initialize("2025-06-18")), None);
    let mut off = Cache::open(None, Path::new("/run/a.sock"), "p", None);
    assert_eq!(off.answer(&initialize("2025-06-18")), None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_directory_holds_a_bounded_number_of_answers_and_nothing_else_goes() {
    let dir = dir();
    std::fs::create_dir_all(&dir).unwrap();
    let theirs = dir.join("mcpb-0000000000000000.answer");
    std::fs::write(&theirs, "not the bridge's").unwrap();
    for n in 0..(FILE_LIMIT + 5) {
        let mut cache = Cache::open(Some(&dir), Path::new("/run/a.sock"), &n.to_string(), None);
        cache.served_by(ServerUser::own().unwrap());
        cache.learn(&initialize("2025-06-18"), Some(b"{}"));
        // (The bound is kept when what was learnt is settled.)
        cache.settle();
    }
    // The limit's worth of answers, and the file the bridge did not write.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), FILE_LIMIT + 1);
    assert!(theirs.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_directory_named_through_a_link_is_not_used() {
    let target = dir();
    std::fs::create_dir_all(&target).unwrap();
    let link = target.with_extension("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let mut cache = cache(&link);
    cache.learn(&initialize("2025-06-18"), Some(b"{}"));
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    assert!(cache.dir.is_none());
    let _ = std::fs::remove_file(&link);
    let _ = std::fs::remove_dir_all(&target);
}

#[test]
fn a_directory_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut cache = cache(&dir);
    cache.learn(&initialize("2025-06-18"), Some(b"{}"));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    assert!(cache.dir.is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn only_one_complete_json_object_is_a_result() {
    for good in [
        r#"{}"#,
        r#" {"a":[1,-2.5e+3,0,true,false,null,"\u00e9\n",{}],"b":"é"} "#,
    ] {
        assert!(entry::is_one_object(good.as_bytes()), "{}", good);
    }
    for bad in [
        r#"{"protocolVersion":"2025-06-18","capabil}"#,
        r#"{"a":1}},"id":999,"x":{"#,
        r#"{"a":1} {}"#,
        r#"[1]"#,
        r#"{"a":01}"#,
        r#"{"a":1,}"#,
        r#"{"a":"tab	in"}"#,
        r#"{"a":"\x"}"#,
        r#"{a:1}"#,
        r#"{"a":tru}"#,
    ] {
        assert!(!entry::is_one_object(bad.as_bytes()), "{}", bad);
    }
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(1000), "]".repeat(1000));
    assert!(!entry::is_one_object(deep.as_bytes()));
}

#[test]
fn a_served_result_has_what_is_left_of_its_ttl_and_keeps_its_scope() {
    let result = br#"{"tools":[],"ttlMs":60000,"cacheScope":"public"}"#;
    assert_eq!(
        entry::served(result, 1500),
        (
            br#"{"tools":[],"ttlMs":58500,"cacheScope":"public"}"#.to_vec(),
            false
        )
    );
    assert_eq!(
        entry::served(result, 60000),
        (
            br#"{"tools":[],"ttlMs":0,"cacheScope":"public"}"#.to_vec(),
            true
        )
    );
    assert_eq!(
        entry::served(br#"{"tools":[]}"#, 5),
        (br#"{"tools":[]}"#.to_vec(), false)
    );
}

#[test]
fn retries_and_interim_results_are_not_kept() {
    let dir = dir();
    let mut cache = cache(&dir);
    let retry = request(
        r#"{"id":1,"method":"tools/list","params":{"inputResponses":{},"requestState":"x"}}"#,
    );
    cache.learn(&retry, Some(br#"{"tools":[]}"#));
    let list = request(r#"{"id":1,"method":"tools/list"}"#);
    cache.learn(
        &list,
        Some(br#"{"resultType":"input_required","inputRequests":{}}"#),
    );
    assert_eq!(cache.answer(&list), None);
    cache.learn(&list, Some(br#"{"resultType":"complete","tools":[]}"#));
    assert!(cache.answer(&list).is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_key_over_its_limit_is_not_kept_and_pages_are_their_own_kind() {
    let dir = dir();
    let mut cache = cache(&dir);
    let long = format!(
        r#"{{"id":1,"method":"tools/list","params":{{"cursor":"{}"}}}}"#,
        "c".repeat(KEY_LIMIT)
    );
    cache.learn(&request(&long), Some(br#"{"tools":[]}"#));
    assert_eq!(cache.answer(&request(&long)), None);
    let page = request(r#"{"id":1,"method":"tools/list","params":{"cursor":"2"}}"#);
    cache.learn(&page, Some(br#"{"tools":[]}"#));
    cache.learn(&initialize("2025-06-18"), Some(b"{}"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort_by_key(|name| name.ends_with(".page"));
    assert_eq!(names.len(), 2, "{:?}", names);
    assert!(names[0].ends_with(".answer") && names[1].ends_with(".page"));
    let _ = std::fs::remove_dir_all(&dir);
}
