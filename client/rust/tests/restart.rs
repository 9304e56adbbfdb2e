// SPDX-License-Identifier: Apache-2.0
//! Held means held, from Rust: a bound unit of ten 1 MiB weights keeps its bytes while weightd is
//! killed and restarted and another client wants the room (the ten count as held, so the other
//! ten do not fit the 12 MiB budget), and the client connects again by itself on its next call,
//! with one `Event::Reconnected` naming the ten weights it re-attached; a share then works.
use std::time::{Duration, Instant};

use weightd::testing::{write_safetensors, Daemon};
use weightd::{Client, Dtype, ErrorCode, Event};

const N: usize = 1 << 20;

/// Tensor `k`'s bytes: a pattern of its own.
fn tensor(k: usize) -> Vec<u8> {
    (0..N).map(|i| ((i * 131 + k * 7 + 13) & 0xff) as u8).collect()
}

fn digest(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for p in parts {
        for b in p.iter() {
            h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

fn bind(c: &Client, from: usize) -> weightd::Result<weightd::BoundUnit> {
    let mut u = c.unit()?;
    for k in from..from + 10 {
        let name = format!("t{k}");
        u.slot(&name, None, &[])?;
        u.set_tensor(&name, "m", &name, None)?;
    }
    u.submit()?;
    Ok(u.validate().map_err(|e| e.error)?.bind())
}

fn locked(c: &Client) -> u64 {
    c.status_summary().unwrap().locked_weights
}

#[test]
fn a_bound_unit_survives_a_kill_and_its_client_reconnects() {
    let mut d = Daemon::prepare().unwrap();
    let path = d.dir().join("m.safetensors");
    let data: Vec<Vec<u8>> = (0..20).map(tensor).collect();
    let names: Vec<String> = (0..20).map(|k| format!("t{k}")).collect();
    let shape = [N as u64];
    let tensors: Vec<(&str, Dtype, &[u64], &[u8])> =
        (0..20).map(|k| (names[k].as_str(), Dtype::U8, &shape[..], data[k].as_slice())).collect();
    write_safetensors(&path, &tensors).unwrap();
    d.start(&[("m", &path)], "budget = 12M").unwrap();

    let engine = Client::connect(Some(d.socket()), "rust-engine").unwrap();
    let unit = bind(&engine, 0).unwrap();
    let bytes = |u: &weightd::BoundUnit| -> Vec<Vec<u8>> {
        (0..10).map(|k| u.weight(&names[k]).unwrap().as_bytes().to_vec()).collect()
    };
    let before = bytes(&unit);
    for k in 0..10 {
        assert_eq!(before[k], data[k], "t{k} as bound");
    }
    let d0 = digest(&before.iter().map(|v| v.as_slice()).collect::<Vec<_>>());

    d.kill().unwrap();
    d.start(&[("m", &path)], "budget = 12M").unwrap();
    let other = Client::connect(Some(d.socket()), "rust-other").unwrap();
    assert_eq!(locked(&other), 10);
    // the ten mapped weights count as held: the other ten do not fit
    let e = bind(&other, 10).err().expect("the budget holds the engine's weights");
    assert_eq!(e.code(), ErrorCode::ResourceExhausted, "{e}");
    let now = bytes(&unit);
    assert_eq!(digest(&now.iter().map(|v| v.as_slice()).collect::<Vec<_>>()), d0);

    // the engine's next call connects again and re-attaches its ten weights
    engine.status_summary().unwrap();
    let events = engine.poll_events(0).unwrap();
    assert_eq!(events, vec![Event::Reconnected { reattached: 10 }]);
    let shared = unit.weight("t0").unwrap().share().unwrap();
    assert_eq!(shared.as_bytes(), data[0].as_slice());
    drop(shared);
    assert_eq!(bytes(&unit), before);

    // let go: the locks go with the mapping, and the room with them
    drop(unit);
    drop(engine);
    let end = Instant::now() + Duration::from_secs(20);
    while locked(&other) != 0 {
        assert!(Instant::now() < end, "weights stayed locked after the engine let go");
        std::thread::sleep(Duration::from_millis(50));
    }
    let u2 = bind(&other, 10).unwrap();
    for k in 10..20 {
        assert_eq!(u2.weight(&names[k]).unwrap().as_bytes(), data[k].as_slice());
    }
}
