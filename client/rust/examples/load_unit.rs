// SPDX-License-Identifier: Apache-2.0
//! Loads a checkpoint as one unit, as tensor-parallel rank RANK of WORLD would: each 2-D
//! floating-point tensor sharded along its rows and cast to BF16, every other tensor whole as
//! stored; validates the whole unit, binds it, and prints what it bound.
//!
//!     cargo run --example load_unit -- [--socket PATH] [--rank R --world W] CHECKPOINT
use std::path::PathBuf;
use std::process::exit;

use weightd::{Client, Dtype, Recipe, Selection, SlotWeight};

struct Args {
    socket: Option<PathBuf>,
    rank: u32,
    world: u32,
    checkpoint: String,
}

fn args() -> Args {
    let mut a = Args { socket: None, rank: 0, world: 2, checkpoint: String::new() };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--socket" => a.socket = it.next().map(PathBuf::from),
            "--rank" => a.rank = it.next().and_then(|v| v.parse().ok()).unwrap_or(u32::MAX),
            "--world" => a.world = it.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            _ if a.checkpoint.is_empty() && !x.starts_with("--") => a.checkpoint = x,
            _ => a.checkpoint.clear(),
        }
    }
    if a.checkpoint.is_empty() || a.world == 0 || a.rank >= a.world {
        eprintln!("usage: load_unit [--socket PATH] [--rank R --world W] CHECKPOINT");
        exit(2);
    }
    a
}

/// Rows rank `rank` of `world` takes of `rows` (torch.tensor_split's rule, as weightd's shard).
fn shard_rows(rows: u64, rank: u32, world: u32) -> u64 {
    let (q, m) = (rows / u64::from(world), rows % u64::from(world));
    q + u64::from(u64::from(rank) < m)
}

/// The first few values of a slot, as numbers where the dtype says how.
fn first_values(w: &SlotWeight<'_>) -> String {
    let vals: Vec<f32> = match w.dtype() {
        d if d == Dtype::F32 => w.as_f32().map(|v| v.to_vec()).unwrap_or_default(),
        d if d == Dtype::BF16 => w
            .as_bf16_bits()
            .map(|v| v.iter().map(|b| f32::from_bits(u32::from(*b) << 16)).collect())
            .unwrap_or_default(),
        _ => return format!("{:02x?}", &w.as_bytes()[..w.as_bytes().len().min(4)]),
    };
    let shown: Vec<String> = vals.iter().take(4).map(|v| format!("{v}")).collect();
    format!("[{}{}]", shown.join(", "), if vals.len() > 4 { ", ..." } else { "" })
}

fn run(a: &Args) -> weightd::Result<()> {
    let client = Client::connect(a.socket.as_deref(), "load_unit")?;
    let table = client.describe(&a.checkpoint)?;
    let mut unit = client.unit()?;
    for t in &table.tensors {
        let float = [Dtype::F32, Dtype::F16, Dtype::BF16].contains(&t.dtype);
        if float && t.shape.len() == 2 && t.shape[0] >= u64::from(a.world) {
            // this rank's rows, in the engine's compute dtype: one recipe, made once by weightd
            let shape = [shard_rows(t.shape[0], a.rank, a.world), t.shape[1]];
            unit.slot(&t.name, Some(Dtype::BF16), &shape)?;
            let part = Recipe::source_part(&a.checkpoint, &t.name, Selection::shard(0, a.rank, a.world));
            unit.set_recipe(&t.name, &part.cast(Dtype::BF16))?;
        } else {
            unit.slot(&t.name, Some(t.dtype), &t.shape)?;
            unit.set_tensor(&t.name, &a.checkpoint, &t.name, None)?;
        }
    }
    unit.submit()?;
    // every fallible step happens here; on failure nothing is held and nothing was bound
    let unit = unit.validate()?;
    let bound = unit.bind();
    println!(
        "bound {} slots of {} as rank {} of {}; weightd read {} bytes for them",
        table.tensors.len(),
        a.checkpoint,
        a.rank,
        a.world,
        bound.bytes_read()
    );
    for name in bound.slot_names() {
        let w = bound.weight(&name).expect("a bound slot has a weight");
        let i = w.info();
        println!(
            "  {:<24} {:<5} {:<12} {:>8} bytes  segment {} +{}  {}",
            name,
            i.dtype,
            format!("{:?}", i.shape),
            i.nbytes,
            i.segment,
            i.offset,
            first_values(&w)
        );
    }
    Ok(())
}

fn main() {
    let a = args();
    if let Err(e) = run(&a) {
        eprintln!("load_unit: {e}");
        exit(1);
    }
}
