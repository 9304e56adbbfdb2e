// SPDX-License-Identifier: Apache-2.0
//! The seed's `ParameterBackend` trait, declared as the seed states it, implemented over
//! weightd for a backend whose parameters hold `Option<weightd::Weight>` slots, and the seed's
//! orchestration of an atomic unit driven against a real, private weightd: preflight,
//! materialize the owners (leases and recipes), finish, aliases by share, validate every slot,
//! then bind every slot.
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use weightd::testing::{write_safetensors, Daemon};
use weightd::{Client, Dtype, ErrorCode, Recipe, Selection, Weight};

// ------------------------------------------------------------------------------------------
// The seed's trait

pub trait ParameterBackend {
    type Lease;
    type Recipe;
    type Source;
    type Context;
    type Materialization;
    type Weight;
    type Parameter;
    type Error: std::error::Error + Send + Sync + 'static;

    /// Starts materializing a leased source tensor; returns while it is in flight.
    fn materialize(
        &self,
        lease: &Self::Lease,
        ctx: &Self::Context,
    ) -> Result<Self::Materialization, Self::Error>;
    /// Starts materializing a recipe over `source`; returns while it is in flight.
    fn materialize_recipe(
        &self,
        recipe: &Self::Recipe,
        source: &Self::Source,
        ctx: &Self::Context,
    ) -> Result<Self::Materialization, Self::Error>;
    /// Borrows the weight while the materialization is in flight (None until it has arrived).
    fn materialized_weight<'m>(
        &self,
        m: &'m Self::Materialization,
    ) -> Result<Option<&'m Self::Weight>, Self::Error>;
    /// Waits and yields the weight.
    fn finish_materialization(&self, m: Self::Materialization) -> Result<Self::Weight, Self::Error>;
    /// Another handle to identical storage, with no reread.
    fn share_materialized_weight(&self, w: &Self::Weight) -> Result<Self::Weight, Self::Error>;
    /// Checks, without publishing, that `w` may be bound to `param`.
    fn validate_bind(&self, param: &Self::Parameter, w: &Self::Weight) -> Result<(), Self::Error>;
    /// Publishes `w` into `param`; cannot fail after a successful validate_bind.
    fn bind(&self, param: &mut Self::Parameter, w: Self::Weight);
}

// ------------------------------------------------------------------------------------------
// The seed's orchestration of one atomic unit, generic over the backend

pub enum Origin<B: ParameterBackend> {
    Lease(B::Lease),
    Recipe(B::Recipe, B::Source),
    /// The same weight as the slot of that index (an alias: two names, one weight).
    Alias(usize),
}

/// Loads one unit into `params` (one per slot of `plan`, same order): all or nothing. Every
/// owner is put in flight first, then finished; aliases share their owner's weight; every slot
/// is validated before any is bound, so a failure anywhere leaves every parameter untouched.
pub fn load_unit<B: ParameterBackend>(
    b: &B,
    ctx: &B::Context,
    plan: &[Origin<B>],
    params: &mut [&mut B::Parameter],
) -> Result<(), B::Error> {
    assert_eq!(plan.len(), params.len());
    let mut in_flight: Vec<Option<B::Materialization>> = Vec::new();
    for o in plan {
        in_flight.push(match o {
            Origin::Lease(l) => Some(b.materialize(l, ctx)?),
            Origin::Recipe(r, s) => Some(b.materialize_recipe(r, s, ctx)?),
            Origin::Alias(_) => None,
        });
    }
    let mut weights: Vec<Option<B::Weight>> = Vec::new();
    for m in in_flight {
        weights.push(match m {
            Some(m) => Some(b.finish_materialization(m)?),
            None => None,
        });
    }
    for i in 0..plan.len() {
        if let Origin::Alias(owner) = plan[i] {
            let w = weights[owner].as_ref().expect("an alias names an owner");
            weights[i] = Some(b.share_materialized_weight(w)?);
        }
    }
    for (p, w) in params.iter().zip(&weights) {
        b.validate_bind(p, w.as_ref().expect("every slot has a weight"))?;
    }
    for (p, w) in params.iter_mut().zip(weights) {
        b.bind(p, w.expect("every slot has a weight"));
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// The backend over weightd

pub struct Lease {
    checkpoint: String,
    tensor: String,
    selection: Option<Selection>,
}

fn lease(checkpoint: &str, tensor: &str, selection: Option<Selection>) -> Lease {
    Lease { checkpoint: checkpoint.into(), tensor: tensor.into(), selection }
}

/// An engine's parameter: the name, dtype and shape it expects, and its slot.
pub struct Param {
    name: &'static str,
    dtype: Dtype,
    shape: Vec<u64>,
    slot: Option<Weight>,
}

fn param(name: &'static str, dtype: Dtype, shape: &[u64]) -> Param {
    Param { name, dtype, shape: shape.to_vec(), slot: None }
}

pub struct WeightdBackend {
    client: Client,
}

impl ParameterBackend for WeightdBackend {
    type Lease = Lease;
    type Recipe = Recipe;
    type Source = String;
    type Context = ();
    type Materialization = weightd::Materialization;
    type Weight = Weight;
    type Parameter = Param;
    type Error = weightd::Error;

    fn materialize(&self, l: &Lease, _: &()) -> weightd::Result<weightd::Materialization> {
        self.client.materialize(&l.checkpoint, &l.tensor, l.selection.as_ref())
    }

    fn materialize_recipe(
        &self,
        r: &Recipe,
        source: &String,
        _: &(),
    ) -> weightd::Result<weightd::Materialization> {
        if r.checkpoints() != [source.as_str()] {
            return Err(weightd::Error::new(
                ErrorCode::InvalidArgument,
                format!("the recipe reads {:?}, not the source {source:?}", r.checkpoints()),
            ));
        }
        self.client.materialize_recipe(r)
    }

    fn materialized_weight<'m>(
        &self,
        m: &'m weightd::Materialization,
    ) -> weightd::Result<Option<&'m Weight>> {
        m.weight()
    }

    fn finish_materialization(&self, m: weightd::Materialization) -> weightd::Result<Weight> {
        m.finish()
    }

    fn share_materialized_weight(&self, w: &Weight) -> weightd::Result<Weight> {
        w.share()
    }

    fn validate_bind(&self, p: &Param, w: &Weight) -> weightd::Result<()> {
        let elems: u64 = p.shape.iter().product();
        let size = p.dtype.element_bytes().unwrap_or(0) as u64;
        if w.dtype() != p.dtype || w.shape() != &p.shape[..] || w.as_bytes().len() as u64 != elems * size {
            return Err(weightd::Error::new(
                ErrorCode::SlotMismatch,
                format!(
                    "parameter {:?} expects {} {:?}, weightd served {} {:?}",
                    p.name,
                    p.dtype,
                    p.shape,
                    w.dtype(),
                    w.shape()
                ),
            )
            .with_slot(p.name));
        }
        Ok(())
    }

    fn bind(&self, p: &mut Param, w: Weight) {
        p.slot = Some(w);
    }
}

impl WeightdBackend {
    /// The unit's preflight: the daemon checks every slot (sources, recipes, aliases, declared
    /// dtypes and shapes) from metadata alone, before anything is read.
    fn preflight(
        &self,
        plan: &[Origin<Self>],
        params: &[&mut Param],
    ) -> weightd::Result<Vec<weightd::Output>> {
        let mut u = self.client.unit()?;
        for p in params {
            u.slot(p.name, Some(p.dtype), &p.shape)?;
        }
        for (o, p) in plan.iter().zip(params) {
            match o {
                Origin::Lease(l) => u.set_tensor(p.name, &l.checkpoint, &l.tensor, l.selection.as_ref())?,
                Origin::Recipe(r, _) => u.set_recipe(p.name, r)?,
                Origin::Alias(i) => u.set_alias(p.name, params[*i].name)?,
            }
        }
        u.preflight()
    }
}

// ------------------------------------------------------------------------------------------
// The model and its checkpoint

/// A layer: every parameter an `Option<Weight>` slot.
pub struct Layer {
    embed: Param,
    q_shard: Param,
    norm: Param,
    k_rows: Param,
    lm_head: Param,
}

impl Layer {
    fn new() -> Layer {
        Layer {
            embed: param("embed", Dtype::F32, &[16, 8]),
            q_shard: param("q_shard", Dtype::F16, &[4, 16]),
            norm: param("norm", Dtype::F32, &[16]),
            k_rows: param("k_rows", Dtype::BF16, &[4, 16]),
            lm_head: param("lm_head", Dtype::F32, &[16, 8]),
        }
    }

    fn params(&mut self) -> Vec<&mut Param> {
        vec![&mut self.embed, &mut self.q_shard, &mut self.norm, &mut self.k_rows, &mut self.lm_head]
    }

    fn bound(&self) -> usize {
        [&self.embed, &self.q_shard, &self.norm, &self.k_rows, &self.lm_head]
            .iter()
            .filter(|p| p.slot.is_some())
            .count()
    }
}

/// The plan of `Layer`: leases, a tensor-parallel shard with a cast, a row range, and an alias.
fn plan(rank: u32) -> Vec<Origin<WeightdBackend>> {
    vec![
        Origin::Lease(lease("m", "wte", None)),
        Origin::Recipe(
            Recipe::source_part("m", "q", Selection::shard(0, rank, 2)).cast(Dtype::F16),
            "m".into(),
        ),
        Origin::Lease(lease("m", "norm", None)),
        Origin::Lease(lease("m", "k", Some(Selection::range(0, 2, 6)))),
        Origin::Alias(0),
    ]
}

fn f32s(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

/// F16 bits of a small non-negative integer (exact below 2048).
fn f16_bits(v: u32) -> u16 {
    if v == 0 {
        return 0;
    }
    let e = 31 - v.leading_zeros();
    (((e + 15) << 10) | ((v - (1 << e)) << (10 - e))) as u16
}

fn bf16_bits(v: u32) -> u16 {
    ((v as f32).to_bits() >> 16) as u16
}

/// The checkpoint this test writes: "wte" F32 [16, 8], "q" F32 [8, 16], "norm" F32 [16],
/// "k" BF16 [8, 16]; each element holds its index.
fn write_checkpoint(path: &Path) {
    let k: Vec<u8> = (0..128).flat_map(|i| bf16_bits(i).to_le_bytes()).collect();
    write_safetensors(
        path,
        &[
            ("wte", Dtype::F32, &[16, 8], &f32s(128)),
            ("q", Dtype::F32, &[8, 16], &f32s(128)),
            ("norm", Dtype::F32, &[16], &f32s(16)),
            ("k", Dtype::BF16, &[8, 16], &k),
        ],
    )
    .unwrap();
}

const PAYLOAD: u64 = 512 + 512 + 64 + 256;

fn daemon() -> Daemon {
    let mut d = Daemon::prepare().unwrap();
    let path = d.dir().join("layer.safetensors");
    write_checkpoint(&path);
    d.start(&[("m", &path)], "").unwrap();
    d
}

fn connect(d: &Daemon) -> WeightdBackend {
    WeightdBackend { client: Client::connect(Some(d.socket()), "parameter-backend-test").unwrap() }
}

/// Waits until the daemon counts `want` references (releases are sent without a reply).
fn wait_references(c: &Client, want: u64) -> u64 {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let n = c.status_summary().unwrap().references;
        if n == want || Instant::now() > end {
            return n;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every slot of a bound layer against the checkpoint's values.
fn check_layer(layer: &Layer, rank: u32) {
    let embed = layer.embed.slot.as_ref().unwrap();
    assert_eq!(embed.as_f32().unwrap(), &(0..128).map(|i| i as f32).collect::<Vec<_>>()[..]);
    let q = layer.q_shard.slot.as_ref().unwrap().as_f16_bits().unwrap();
    let first = rank * 64;
    assert_eq!(q, &(first..first + 64).map(f16_bits).collect::<Vec<_>>()[..]);
    assert_eq!(layer.norm.slot.as_ref().unwrap().as_f32().unwrap()[15], 15.0);
    let k = layer.k_rows.slot.as_ref().unwrap().as_bf16_bits().unwrap();
    assert_eq!(k, &(32..96).map(bf16_bits).collect::<Vec<_>>()[..]);
    // the alias: another handle to identical storage
    let head = layer.lm_head.slot.as_ref().unwrap();
    assert_eq!(head.info().key, embed.info().key);
    assert_eq!((head.info().segment, head.info().offset), (embed.info().segment, embed.info().offset));
    assert_eq!(head.as_bytes().as_ptr(), embed.as_bytes().as_ptr());
}

#[test]
fn seed_orchestration_binds_a_unit_and_a_second_process_reads_nothing() {
    let d = daemon();
    let b = connect(&d);
    let mut layer = Layer::new();
    let plan = plan(1);

    let outs = b.preflight(&plan, &layer.params()).unwrap();
    let q = outs.iter().find(|o| o.name == "q_shard").unwrap();
    assert_eq!((q.dtype, &q.shape[..], q.nbytes), (Dtype::F16, &[4u64, 16][..], 128));
    assert_eq!(outs.iter().find(|o| o.name == "lm_head").unwrap().alias_of.as_deref(), Some("embed"));
    assert_eq!(b.client.status_summary().unwrap().bytes_read, 0, "preflight reads no payload");

    load_unit(&b, &(), &plan, &mut layer.params()).unwrap();
    assert_eq!(layer.bound(), 5);
    check_layer(&layer, 1);
    let status = b.client.status().unwrap();
    assert!(status.bytes_read > 0 && status.bytes_read <= PAYLOAD, "read {}", status.bytes_read);
    // embed and lm_head are one weight held twice; the others once each
    let embed = layer.embed.slot.as_ref().unwrap();
    let ws = status.weight_list.iter().find(|w| w.handle == embed.info().handle).unwrap();
    assert_eq!(ws.refs, 2);
    assert_eq!(status.references, 5);

    // A second process binds the same unit while this one holds it: weightd reads nothing.
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--ignored", "--exact", "second_process", "--nocapture", "--test-threads=1"])
        .env("WD_RUST_SECOND_PROCESS", d.socket())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "second process failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("second process: daemon read 0 bytes, unit read 0 bytes"), "{stdout}");
    // ... and it bound the very memory this process holds (same segment, same offset)
    let e = layer.embed.slot.as_ref().unwrap().info();
    assert!(stdout.contains(&format!("embed {}+{}", e.segment, e.offset)), "{stdout}");
    assert_eq!(b.client.status_summary().unwrap().bytes_read, status.bytes_read);

    drop(layer);
    assert_eq!(wait_references(&b.client, 0), 0, "dropping the parameters releases every weight");
}

/// The other process of the test above (run by it; ignored on its own).
#[test]
#[ignore]
fn second_process() {
    let socket = match std::env::var_os("WD_RUST_SECOND_PROCESS") {
        Some(s) => s,
        None => return,
    };
    let b = WeightdBackend { client: Client::connect(Some(Path::new(&socket)), "second-process").unwrap() };
    let before = b.client.status_summary().unwrap().bytes_read;
    let mut layer = Layer::new();
    let plan = plan(1);
    b.preflight(&plan, &layer.params()).unwrap();
    load_unit(&b, &(), &plan, &mut layer.params()).unwrap();
    check_layer(&layer, 1);

    // the same slots as one weightd unit
    let mut u = b.client.unit().unwrap();
    for p in layer.params() {
        u.slot(p.name, Some(p.dtype), &p.shape).unwrap();
    }
    u.set_tensor("embed", "m", "wte", None).unwrap();
    u.set_recipe("q_shard", &Recipe::source_part("m", "q", Selection::shard(0, 1, 2)).cast(Dtype::F16))
        .unwrap();
    u.set_tensor("norm", "m", "norm", None).unwrap();
    u.set_tensor("k_rows", "m", "k", Some(&Selection::range(0, 2, 6))).unwrap();
    u.set_alias("lm_head", "embed").unwrap();
    u.submit().unwrap();
    let bound = u.validate().unwrap().bind();
    let after = b.client.status_summary().unwrap().bytes_read;
    println!("second process: daemon read {} bytes, unit read {} bytes", after - before, bound.bytes_read());
    let e = layer.embed.slot.as_ref().unwrap().info();
    println!("embed {}+{}", e.segment, e.offset);
    assert_eq!(bound.weight("embed").unwrap().info().key, e.key);
}

#[test]
fn a_unit_with_one_bad_slot_publishes_nothing() {
    let d = daemon();
    let b = connect(&d);

    // A slot whose declared shape the source does not have: preflight names it, nothing is read.
    let mut layer = Layer::new();
    layer.norm.shape = vec![8];
    let plan = plan(0);
    let err = b.preflight(&plan, &layer.params()).unwrap_err();
    assert_eq!((err.code(), err.slot()), (ErrorCode::SlotMismatch, "norm"), "{err}");
    assert_eq!(layer.bound(), 0);
    assert_eq!(b.client.status_summary().unwrap().bytes_read, 0);

    // The same unit loaded without a preflight: every owner is made and finished, then
    // validate_bind refuses the bad slot, and no parameter was published.
    let err = load_unit(&b, &(), &plan, &mut layer.params()).unwrap_err();
    assert_eq!((err.code(), err.slot()), (ErrorCode::SlotMismatch, "norm"), "{err}");
    assert!(err.message().contains("norm"));
    assert_eq!(layer.bound(), 0, "a failed validate publishes nothing");
    assert_eq!(wait_references(&b.client, 0), 0, "the unit's weights were released");

    // A slot whose tensor does not exist fails at finish: nothing published either.
    let mut layer = Layer::new();
    let mut bad = plan;
    bad[2] = Origin::Lease(lease("m", "no-such-tensor", None));
    let err = load_unit(&b, &(), &bad, &mut layer.params()).unwrap_err();
    assert_eq!(err.code(), ErrorCode::UnknownTensor, "{err}");
    assert_eq!(layer.bound(), 0);

    // A recipe that names another source than the one it is materialized over.
    let mut bad = self::plan(0);
    bad[1] = Origin::Recipe(Recipe::source("m", "q"), "other".into());
    assert_eq!(load_unit(&b, &(), &bad, &mut layer.params()).unwrap_err().code(), ErrorCode::InvalidArgument);
    assert_eq!(layer.bound(), 0);
    assert_eq!(wait_references(&b.client, 0), 0);

    // Fixed, the unit binds (and the error was the only thing that stopped it).
    let mut layer = Layer::new();
    load_unit(&b, &(), &self::plan(0), &mut layer.params()).unwrap();
    check_layer(&layer, 0);
}

#[test]
fn an_in_flight_weight_is_borrowed_then_finished() {
    let d = daemon();
    let b = connect(&d);
    let m = b.materialize_recipe(&Recipe::source("m", "k").cast(Dtype::F32), &"m".to_string(), &()).unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    let borrowed = loop {
        if let Some(w) = b.materialized_weight(&m).unwrap() {
            break w;
        }
        assert!(Instant::now() < end, "the weight never arrived");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!((borrowed.dtype(), borrowed.shape()), (Dtype::F32, &[8u64, 16][..]));
    let (ptr, key) = (borrowed.as_bytes().as_ptr(), borrowed.info().key);
    assert_eq!(borrowed.as_f32().unwrap()[77], 77.0);
    let w = b.finish_materialization(m).unwrap();
    assert_eq!((w.as_bytes().as_ptr(), w.info().key), (ptr, key), "finish yields the borrowed weight");

    // dropping a request abandons it; the daemon keeps nothing for us
    drop(b.materialize(&lease("m", "wte", None), &()).unwrap());
    drop(w);
    assert_eq!(wait_references(&b.client, 0), 0);
}

#[test]
fn clients_and_weights_are_shared_between_threads() {
    let d = daemon();
    let client = Client::connect(Some(d.socket()), "threads").unwrap();
    let w = client.materialize("m", "wte", None).unwrap().finish().unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (client, w) = (&client, &w);
            s.spawn(move || {
                // one client, requests from every thread at once; one weight read by all
                for i in 0..8u64 {
                    let row = (t * 8 + i) % 16;
                    let got =
                        client.materialize("m", "wte", Some(&Selection::range(0, row, row + 1))).unwrap();
                    let got = got.finish().unwrap();
                    assert_eq!(got.as_f32().unwrap()[0], (row * 8) as f32);
                    assert_eq!(w.as_f32().unwrap()[(row * 8) as usize], (row * 8) as f32);
                    let again = w.share().unwrap();
                    assert_eq!(again.as_bytes().as_ptr(), w.as_bytes().as_ptr());
                }
            });
        }
    });
    // a unit goes to another thread whole, and its bound weights are read there
    let mut u = client.unit().unwrap();
    u.slot("norm", Some(Dtype::F32), &[16]).unwrap();
    u.set_tensor("norm", "m", "norm", None).unwrap();
    let sum = std::thread::spawn(move || {
        u.submit().unwrap();
        let bound = u.validate().unwrap().bind();
        let s: f32 = bound.weight("norm").unwrap().as_f32().unwrap().iter().sum();
        s
    })
    .join()
    .unwrap();
    assert_eq!(sum, 120.0);
    drop(w);
    assert_eq!(wait_references(&client, 0), 0);
}

#[test]
fn validate_failure_returns_the_unit_to_fix() {
    let d = daemon();
    let client = Client::connect(Some(d.socket()), "fix").unwrap();
    let mut u = client.unit().unwrap();
    u.slot("w", Some(Dtype::F32), &[16, 8]).unwrap();
    u.set_tensor("w", "m", "no-such-tensor", None).unwrap();
    u.submit().unwrap();
    let failed = u.validate().unwrap_err();
    assert_eq!((failed.error.code(), failed.error.slot()), (ErrorCode::UnknownTensor, "w"));
    let mut u = failed.into_unit();
    u.set_tensor("w", "m", "wte", None).unwrap();
    u.submit().unwrap();
    let bound = u.validate().unwrap().bind();
    assert_eq!(bound.weight("w").unwrap().as_f32().unwrap()[127], 127.0);
    assert!(bound.weight("nope").is_none());
    // a slot's weight shared out of the unit outlives it
    let kept = bound.weight("w").unwrap().share().unwrap();
    drop(bound);
    assert_eq!(kept.as_f32().unwrap()[1], 1.0);
}

/// Whether the page holding `p` is in this process's page tables (/proc/self/pagemap's present
/// bit; mincore would say yes for any page of a segment, mapped here or not).
fn page_present(p: *const u8) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    extern "C" {
        fn sysconf(name: std::os::raw::c_int) -> std::os::raw::c_long;
    }
    // _SC_PAGESIZE on Linux
    const SC_PAGESIZE: std::os::raw::c_int = 30;
    // SAFETY: sysconf only reads the system's configuration.
    let page = unsafe { sysconf(SC_PAGESIZE) } as u64;
    let mut f = std::fs::File::open("/proc/self/pagemap").unwrap();
    f.seek(SeekFrom::Start(p as u64 / page * 8)).unwrap();
    let mut ent = [0u8; 8];
    f.read_exact(&mut ent).unwrap();
    u64::from_le_bytes(ent) >> 63 == 1
}

#[test]
fn populate_at_validate_puts_the_pages_in_the_page_tables() {
    let d = daemon();
    let mut seen = Vec::new();
    for populate in [false, true] {
        // a connection of its own: its own mapping of the segment, not yet read
        let client = Client::connect(Some(d.socket()), "populate").unwrap();
        let mut u = client.unit().unwrap();
        u.slot("q", Some(Dtype::F32), &[8, 16]).unwrap();
        u.set_tensor("q", "m", "q", None).unwrap();
        u.set_populate(populate).unwrap();
        u.submit().unwrap();
        let bound = u.validate().unwrap().bind();
        let q = bound.weight("q").unwrap();
        seen.push(page_present(q.as_bytes().as_ptr()));
        assert_eq!(q.as_f32().unwrap()[127], 127.0);
    }
    assert_eq!(seen, [false, true]);
}
