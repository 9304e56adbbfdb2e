// SPDX-License-Identifier: Apache-2.0
//! Runs examples/load_unit against a private weightd and checks what it says it bound.
use std::path::PathBuf;
use std::process::Command;

use weightd::testing::Daemon;

/// target/<profile>/examples/load_unit, beside this test's target/<profile>/deps/.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("examples").join("load_unit");
    assert!(
        path.exists(),
        "{} is missing: build the examples first (plain `cargo test` does)",
        path.display()
    );
    path
}

#[test]
fn load_unit_binds_a_sharded_cast_unit() {
    let d = Daemon::with_sample().unwrap();
    let out = Command::new(example())
        .args(["--socket".as_ref(), d.socket().as_os_str()])
        .args(["--rank", "1", "--world", "2", "m"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("bound 4 slots of m as rank 1 of 2; weightd read "), "{text}");
    // wte F32 [16, 8]: rows 8..16 as BF16; q F32 [8, 16]: rows 4..8; qb BF16 [8, 16]: rows
    // 4..8 (a cast to its own dtype); norm [16] whole
    let line = |name: &str| text.lines().find(|l| l.trim_start().starts_with(name)).unwrap_or("").to_string();
    assert!(
        line("wte ").contains("BF16  [8, 8]") && line("wte ").contains("[64, 65, 66, 67, ...]"),
        "{text}"
    );
    assert!(line("q ").contains("BF16  [4, 16]") && line("q ").contains("[64, 65, 66, 67, ...]"), "{text}");
    assert!(line("qb ").contains("BF16  [4, 16]") && line("qb ").contains("128 bytes"), "{text}");
    assert!(line("norm ").contains("F32   [16]") && line("norm ").contains("[0, 1, 2, 3, ...]"), "{text}");

    // an unknown checkpoint: a clear error and a failing exit
    let out = Command::new(example())
        .args(["--socket".as_ref(), d.socket().as_os_str()])
        .arg("nope")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
}
