// SPDX-License-Identifier: Apache-2.0
//! The one module with `unsafe`: libweightd's C declarations (`sys`, written by hand from
//! `weightd/client.h` and `weightd/error.h`) and the smallest owning handles over them. Every
//! other module of the crate is safe Rust (the crate root denies `unsafe_code`).
//!
//! The threading rules of client.h's "Threads" section are carried by these handles:
//! - `ClientHandle` is `Send + Sync` (a client may be used from several threads at once). It is
//!   shared through an `Arc` that every unit, in-flight request and weight holds, so its Drop,
//!   the only place `weightd_close` is called, runs after every other call on the client.
//! - `InflightHandle` and `UnitHandle` are `Send` but not `Sync` (one thread at a time, handed
//!   between threads freely), and every call that changes them takes `&mut self`.
//! - `WeightHandle` is `Send + Sync`: its accessors, share and dup may run concurrently;
//!   `weightd_weight_map` runs only while the handle is being made (before anyone else can see
//!   it) and `weightd_release` only in Drop.
#![allow(unsafe_code)]
#![warn(unsafe_op_in_unsafe_fn)]

use std::cell::UnsafeCell;
use std::ffi::{CStr, CString};
use std::mem::ManuallyDrop;
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use crate::dtype::{Dtype, Element};
use crate::error::{Error, ErrorCode, Result};
use crate::info::Output;
use crate::info::WeightInfo;
use crate::info::{
    Description, Event, MetaEntry, SegmentStatus, ServerInfo, SourceInfo, Status, TensorInfo,
    WeightStatus,
};
use crate::selection::Selection;

mod process;
pub(crate) mod sys;

pub(crate) use process::{die_with_parent, terminate};

// ------------------------------------------------------------------------------------------
// Errors and strings

impl sys::weightd_error {
    fn new() -> Self {
        sys::weightd_error {
            code: 0,
            node: 0,
            axis: -1,
            expected: 0,
            actual: 0,
            checkpoint: [0; 128],
            tensor: [0; 256],
            slot: [0; 256],
            message: [0; 768],
        }
    }
}

/// A NUL-terminated field of `weightd_error` (a Rust-owned array: no raw pointer is read).
fn field(a: &[c_char]) -> String {
    let bytes: Vec<u8> = a.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Turns a call's return value into a Result, reading `err` when it failed.
fn check(rc: c_int, e: &sys::weightd_error) -> Result<c_int> {
    if rc >= 0 {
        return Ok(rc);
    }
    Err(Error {
        code: ErrorCode::from_raw(if e.code != 0 { e.code } else { rc }),
        message: field(&e.message),
        slot: field(&e.slot),
        checkpoint: field(&e.checkpoint),
        tensor: field(&e.tensor),
        node: if e.node > 0 { Some(e.node - 1) } else { None },
        axis: if e.axis >= 0 { Some(e.axis) } else { None },
        expected: e.expected,
        actual: e.actual,
    })
}

/// Calls `f` with a fresh `weightd_error` and checks what it returns.
fn call(f: impl FnOnce(*mut sys::weightd_error) -> c_int) -> Result<c_int> {
    let mut e = sys::weightd_error::new();
    let rc = f(&mut e);
    check(rc, &e)
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid(format!("{s:?} contains a NUL byte")))
}

/// A C string of libweightd as an owned String ("" for NULL).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid during the call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-NULL and NUL-terminated by the caller's contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// `n` elements at `p` ("" for NULL or 0).
///
/// # Safety
/// When `n > 0` and `p` is not NULL, `p` points to `n` initialised `T` valid for `'a`.
unsafe fn slice<'a, T>(p: *const T, n: usize) -> &'a [T] {
    if p.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}

impl ErrorCode {
    /// libweightd's short stable name ("unknown-tensor", "disconnected", ...).
    pub fn name(self) -> &'static str {
        code_name(self.raw())
    }
}

/// libweightd's name of a code (`weightd_code_name`).
fn code_name(code: i32) -> &'static str {
    // SAFETY: weightd_code_name accepts any int and returns a pointer to a static,
    // NUL-terminated string (client.h: "never NULL"), valid for the life of the program.
    let p = unsafe { sys::weightd_code_name(code) };
    if p.is_null() {
        return "unknown";
    }
    // SAFETY: as above: static and NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("unknown")
}

/// The linked libweightd's version string.
pub(crate) fn version() -> String {
    // SAFETY: weightd_version takes nothing and returns a static NUL-terminated string.
    unsafe { text(sys::weightd_version()) }
}

// ------------------------------------------------------------------------------------------
// Client

pub(crate) struct ClientHandle {
    raw: NonNull<sys::weightd_client>,
}

// SAFETY: client.h (Threads): every call that takes a weightd_client, connect and close
// excepted, is safe to make from several threads at once. connect made this handle before
// anyone could share it, and close runs only in Drop, when no other reference exists.
unsafe impl Send for ClientHandle {}
// SAFETY: as for Send: the calls made through `&ClientHandle` are the concurrent-safe ones.
unsafe impl Sync for ClientHandle {}

impl Drop for ClientHandle {
    fn drop(&mut self) {
        // SAFETY: every unit, in-flight handle and weight of this client holds an Arc of it, so
        // this runs after the last of them was freed or released: close is the last call, as
        // client.h requires, and `raw` is not used again.
        unsafe { sys::weightd_close(self.raw.as_ptr()) }
    }
}

impl ClientHandle {
    pub(crate) fn connect(socket: Option<&Path>, name: &str) -> Result<Arc<ClientHandle>> {
        let socket = socket
            .map(|p| {
                CString::new(p.as_os_str().as_bytes())
                    .map_err(|_| Error::invalid("the socket path contains a NUL byte"))
            })
            .transpose()?;
        let name = cstring(name)?;
        let mut raw: *mut sys::weightd_client = ptr::null_mut();
        call(|e| {
            // SAFETY: the strings are NUL-terminated and outlive the call (the library copies
            // them); `raw` and `e` are valid for writes.
            unsafe {
                sys::weightd_connect(
                    socket.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
                    name.as_ptr(),
                    &mut raw,
                    e,
                )
            }
        })?;
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::local(ErrorCode::Internal, "weightd_connect returned no client"))?;
        Ok(Arc::new(ClientHandle { raw }))
    }

    fn ptr(&self) -> *mut sys::weightd_client {
        self.raw.as_ptr()
    }

    pub(crate) fn server(&self) -> ServerInfo {
        // SAFETY: the client is open (we hold it); the struct it returns is owned by the client,
        // immutable and valid until the client is closed, which cannot happen during `&self`.
        let s = match unsafe { sys::weightd_server(self.ptr()).as_ref() } {
            Some(s) => s,
            None => return ServerInfo::default(),
        };
        ServerInfo {
            protocol_version: s.protocol_version,
            // SAFETY: strings of that struct, valid as long as it is.
            server_version: unsafe { text(s.server_version) },
            // SAFETY: as above.
            instance: unsafe { text(s.instance) },
            max_frame_bytes: s.max_frame_bytes,
            max_pending_requests: s.max_pending_requests,
            max_unit_entries: s.max_unit_entries,
            max_recipe_nodes: s.max_recipe_nodes,
            max_client_bytes: s.max_client_bytes,
            max_client_weights: s.max_client_weights,
            min_protocol_version: s.min_protocol_version,
            max_protocol_version: s.max_protocol_version,
            segment_max_bytes: s.segment_max_bytes,
            max_client_segments: s.max_client_segments,
        }
    }

    pub(crate) fn list(&self) -> Result<Vec<SourceInfo>> {
        let mut l: *mut sys::weightd_source_list = ptr::null_mut();
        // SAFETY: a concurrent-safe call on an open client; `l` and `e` are valid for writes.
        call(|e| unsafe { sys::weightd_list(self.ptr(), &mut l, e) })?;
        // SAFETY: on success `l` is a list we own; its array holds `count` entries, whose
        // strings live as long as the list.
        let out = unsafe { slice((*l).sources, (*l).count).iter().map(|s| source_info(s)).collect() };
        // SAFETY: freed once, after the last read of it.
        unsafe { sys::weightd_source_list_free(l) };
        Ok(out)
    }

    pub(crate) fn describe(&self, checkpoint: &str) -> Result<Description> {
        let name = cstring(checkpoint)?;
        let mut d: *mut sys::weightd_description = ptr::null_mut();
        // SAFETY: a concurrent-safe call; the name is NUL-terminated; outputs valid for writes.
        call(|e| unsafe { sys::weightd_describe(self.ptr(), name.as_ptr(), &mut d, e) })?;
        // SAFETY: on success `d` is a description we own until weightd_description_free; its
        // arrays hold n_tensors and n_metadata entries, their strings and shapes live as long.
        let out = unsafe {
            let d = &*d;
            Description {
                source: source_info(&d.source),
                tensors: slice(d.tensors, d.n_tensors)
                    .iter()
                    .map(|t| TensorInfo {
                        name: text(t.name),
                        dtype: Dtype::from_name_or_unknown(&text(t.dtype)),
                        shape: slice(t.shape, t.ndim).to_vec(),
                        nbytes: t.nbytes,
                        offset: t.offset,
                        file: text(t.file),
                        block_elems: t.block_elems,
                        block_bytes: t.block_bytes,
                    })
                    .collect(),
                metadata: slice(d.metadata, d.n_metadata)
                    .iter()
                    .map(|m| MetaEntry { key: text(m.key), value: text(m.value), kind: text(m.type_) })
                    .collect(),
            }
        };
        // SAFETY: freed once, after the last read of it.
        unsafe { sys::weightd_description_free(d) };
        Ok(out)
    }

    pub(crate) fn poll_events(&self, timeout_ms: i32) -> Result<Vec<Event>> {
        let mut l: *mut sys::weightd_event_list = ptr::null_mut();
        // SAFETY: a concurrent-safe call on an open client; outputs valid for writes.
        call(|e| unsafe { sys::weightd_poll_events(self.ptr(), timeout_ms, &mut l, e) })?;
        // SAFETY: on success `l` is a list we own until weightd_event_list_free; its array holds
        // `count` events, whose strings live as long as the list.
        let out = unsafe {
            slice((*l).events, (*l).count)
                .iter()
                .map(|ev| {
                    let what = text(ev.what);
                    let checkpoint = text(ev.checkpoint);
                    match what.as_str() {
                        "reconnected" => Event::Reconnected { reattached: ev.generation },
                        "generation" => Event::Generation { checkpoint, generation: ev.generation },
                        "removed" => Event::Removed { checkpoint },
                        _ => Event::Other { checkpoint, what, generation: ev.generation },
                    }
                })
                .collect()
        };
        // SAFETY: freed once, after the last read of it.
        unsafe { sys::weightd_event_list_free(l) };
        Ok(out)
    }

    pub(crate) fn status(&self, full: bool) -> Result<Status> {
        let mut s: *mut sys::weightd_status = ptr::null_mut();
        call(|e| {
            // SAFETY: concurrent-safe calls on an open client; outputs valid for writes.
            unsafe {
                if full {
                    sys::weightd_status_get(self.ptr(), &mut s, e)
                } else {
                    sys::weightd_status_summary(self.ptr(), &mut s, e)
                }
            }
        })?;
        // SAFETY: on success `s` is a status we own until weightd_status_free; each array holds
        // its n_* entries, whose strings, shapes and digests live as long as the status.
        let out = unsafe {
            let s = &*s;
            Status {
                instance: text(s.instance),
                server_version: text(s.server_version),
                uptime_ms: s.uptime_ms,
                bytes_resident: s.bytes_resident,
                budget_bytes: s.budget_bytes,
                weights: s.weights,
                clients: s.clients,
                bytes_read: s.bytes_read,
                materializations: s.materializations,
                materializations_failed: s.materializations_failed,
                references: s.references,
                segments: s.segments,
                locked_weights: s.locked_weights,
                locked_bytes: s.locked_bytes,
                sources: slice(s.sources, s.n_sources).iter().map(|x| source_info(x)).collect(),
                weight_list: slice(s.weight_list, s.n_weights)
                    .iter()
                    .map(|w| WeightStatus {
                        handle: w.handle,
                        label: text(w.label),
                        dtype: Dtype::from_name_or_unknown(&text(w.dtype)),
                        shape: slice(w.shape, w.ndim).to_vec(),
                        nbytes: w.nbytes,
                        refs: w.refs,
                        clients: w.clients,
                        source: text(w.source),
                        segment: w.segment,
                        offset: w.offset,
                    })
                    .collect(),
                segment_list: slice(s.segment_list, s.n_segments)
                    .iter()
                    .map(|g| SegmentStatus {
                        id: g.id,
                        name: text(g.name),
                        size: g.size,
                        weights: g.weights,
                        held: g.held,
                        source: text(g.source),
                    })
                    .collect(),
            }
        };
        // SAFETY: freed once, after the last read of it.
        unsafe { sys::weightd_status_free(s) };
        Ok(out)
    }
}

/// # Safety
/// `s`'s strings are valid for the duration of the call.
unsafe fn source_info(s: &sys::weightd_source_info) -> SourceInfo {
    // SAFETY: the caller's contract.
    unsafe {
        SourceInfo {
            name: text(s.name),
            kind: text(s.kind),
            path: text(s.path),
            tensors: s.tensors,
            bytes: s.bytes,
            generation: s.generation,
            state: text(s.state),
            error: text(s.error),
            files: s.files,
        }
    }
}

// ------------------------------------------------------------------------------------------
// Selections and recipes (made from the crate's values just before a call, then freed)

struct SelectionHandle {
    raw: NonNull<sys::weightd_selection>,
}

impl Drop for SelectionHandle {
    fn drop(&mut self) {
        // SAFETY: we own the selection and free it once.
        unsafe { sys::weightd_selection_free(self.raw.as_ptr()) }
    }
}

impl SelectionHandle {
    fn new(s: &Selection) -> Result<SelectionHandle> {
        let mut raw: *mut sys::weightd_selection = ptr::null_mut();
        // SAFETY: each constructor copies its inputs (the arrays are read for `len` elements
        // during the call only); `raw` and `e` are valid for writes.
        call(|e| unsafe {
            match s {
                Selection::Full => sys::weightd_selection_full(&mut raw, e),
                Selection::Range { axis, start, end } => {
                    sys::weightd_selection_range(*axis, *start, *end, &mut raw, e)
                }
                Selection::Indices { axis, indices } => {
                    sys::weightd_selection_indices(*axis, indices.as_ptr(), indices.len(), &mut raw, e)
                }
                Selection::Elements { start, end, shape } => {
                    sys::weightd_selection_elements(*start, *end, shape.as_ptr(), shape.len(), &mut raw, e)
                }
                Selection::Shard { axis, rank, world } => {
                    sys::weightd_selection_shard(*axis, *rank, *world, &mut raw, e)
                }
            }
        })?;
        NonNull::new(raw)
            .map(|raw| SelectionHandle { raw })
            .ok_or_else(|| Error::local(ErrorCode::Internal, "libweightd returned no selection"))
    }

    fn ptr(&self) -> *const sys::weightd_selection {
        self.raw.as_ptr()
    }
}

fn selection(sel: Option<&Selection>) -> Result<Option<SelectionHandle>> {
    sel.map(SelectionHandle::new).transpose()
}

fn sel_ptr(sel: &Option<SelectionHandle>) -> *const sys::weightd_selection {
    sel.as_ref().map_or(ptr::null(), |s| s.ptr())
}

/// A C recipe being built node by node (by `recipe::Recipe`'s lowering; one thread, never
/// shared: the raw pointer keeps it `!Send` and `!Sync`).
pub(crate) struct RecipeHandle {
    raw: NonNull<sys::weightd_recipe>,
}

impl Drop for RecipeHandle {
    fn drop(&mut self) {
        // SAFETY: we own the recipe and free it once.
        unsafe { sys::weightd_recipe_free(self.raw.as_ptr()) }
    }
}

fn axis(a: u32) -> Result<c_int> {
    c_int::try_from(a).map_err(|_| Error::invalid(format!("axis {a} is out of range")))
}

impl RecipeHandle {
    pub(crate) fn new() -> Result<RecipeHandle> {
        let mut raw: *mut sys::weightd_recipe = ptr::null_mut();
        // SAFETY: outputs valid for writes.
        call(|e| unsafe { sys::weightd_recipe_new(&mut raw, e) })?;
        NonNull::new(raw)
            .map(|raw| RecipeHandle { raw })
            .ok_or_else(|| Error::local(ErrorCode::Internal, "libweightd returned no recipe"))
    }

    fn p(&mut self) -> *mut sys::weightd_recipe {
        self.raw.as_ptr()
    }

    pub(crate) fn as_ptr(&self) -> *const sys::weightd_recipe {
        self.raw.as_ptr()
    }

    // Each builder below appends one node and returns its index. SAFETY (for all of them): the
    // recipe is ours and used by this thread alone (`&mut self`); strings are NUL-terminated,
    // arrays are read for their length during the call only (the library copies them).

    pub(crate) fn source(
        &mut self,
        checkpoint: &str,
        tensor: &str,
        sel: Option<&Selection>,
    ) -> Result<c_int> {
        let (c, t, s) = (cstring(checkpoint)?, cstring(tensor)?, selection(sel)?);
        let r = self.p();
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_recipe_source(r, c.as_ptr(), t.as_ptr(), sel_ptr(&s), e) })
    }

    pub(crate) fn select(&mut self, input: c_int, sel: &Selection) -> Result<c_int> {
        let s = SelectionHandle::new(sel)?;
        let r = self.p();
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_recipe_select(r, input, s.ptr(), e) })
    }

    pub(crate) fn concat(&mut self, ax: u32, inputs: &[c_int], stack: bool) -> Result<c_int> {
        let (a, r) = (axis(ax)?, self.p());
        // SAFETY: see above.
        call(|e| unsafe {
            if stack {
                sys::weightd_recipe_stack(r, a, inputs.as_ptr(), inputs.len(), e)
            } else {
                sys::weightd_recipe_concat(r, a, inputs.as_ptr(), inputs.len(), e)
            }
        })
    }

    pub(crate) fn reshape(&mut self, input: c_int, shape: &[u64]) -> Result<c_int> {
        let r = self.p();
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_recipe_reshape(r, input, shape.as_ptr(), shape.len(), e) })
    }

    pub(crate) fn transpose(&mut self, input: c_int, perm: &[u32]) -> Result<c_int> {
        let r = self.p();
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_recipe_transpose(r, input, perm.as_ptr(), perm.len(), e) })
    }

    pub(crate) fn cast(&mut self, input: c_int, dtype: Dtype) -> Result<c_int> {
        let (d, r) = (cstring(dtype.name())?, self.p());
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_recipe_cast(r, input, d.as_ptr(), e) })
    }

    pub(crate) fn view(&mut self, input: c_int, dtype: Dtype, shape: &[u64]) -> Result<c_int> {
        let (d, r) = (cstring(dtype.name())?, self.p());
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_recipe_view(r, input, d.as_ptr(), shape.as_ptr(), shape.len(), e) })
    }

    pub(crate) fn dequant_block(
        &mut self,
        input: c_int,
        scale: c_int,
        block: &[u64],
        dtype: Dtype,
    ) -> Result<c_int> {
        let (d, r) = (cstring(dtype.name())?, self.p());
        // SAFETY: see above.
        call(|e| unsafe {
            sys::weightd_recipe_dequant_block(r, input, scale, block.as_ptr(), block.len(), d.as_ptr(), e)
        })
    }
}

// ------------------------------------------------------------------------------------------
// Weights

/// A weight this process holds, mapped. Releases its reference (and the mapping) on Drop.
pub(crate) struct WeightHandle {
    raw: NonNull<sys::weightd_weight>,
    data: *const u8,
    info: WeightInfo,
    _client: Arc<ClientHandle>,
}

// SAFETY: client.h (Threads): a weight's accessors, weightd_share and weightd_weight_dup may be
// called from several threads at once; weightd_weight_map ran in `adopt`, before the handle
// existed for anyone else, and weightd_release runs only in Drop (exclusive). The mapping is
// read-only memory the daemon never writes again ("mapped weight memory is ordinary read-only
// memory: read it from any thread").
unsafe impl Send for WeightHandle {}
// SAFETY: as for Send: `&WeightHandle` reaches only accessors, share, dup and the bytes.
unsafe impl Sync for WeightHandle {}

impl Drop for WeightHandle {
    fn drop(&mut self) {
        // SAFETY: we own this weight; release is its last call (no borrow of the bytes can
        // outlive `&self`), and works after the connection closed too.
        unsafe { sys::weightd_release(self.raw.as_ptr()) }
    }
}

/// What a weight says about itself.
///
/// # Safety
/// `w` is a live weight (owned by us, a unit or an in-flight handle) for the duration.
unsafe fn weight_info(w: *const sys::weightd_weight) -> WeightInfo {
    // SAFETY: accessors of a live weight; the strings and arrays they return live as long as
    // the weight and are copied here. The key is WEIGHTD_DIGEST_LEN bytes.
    unsafe {
        let mut key = [0u8; sys::WEIGHTD_DIGEST_LEN];
        let k = sys::weightd_weight_key(w);
        if !k.is_null() {
            key.copy_from_slice(slice(k, sys::WEIGHTD_DIGEST_LEN));
        }
        WeightInfo {
            name: text(sys::weightd_weight_name(w)),
            dtype: Dtype::from_name_or_unknown(&text(sys::weightd_weight_dtype(w))),
            shape: slice(sys::weightd_weight_shape(w), sys::weightd_weight_ndim(w)).to_vec(),
            nbytes: sys::weightd_weight_nbytes(w),
            segment: sys::weightd_weight_segment(w),
            offset: sys::weightd_weight_offset(w),
            handle: sys::weightd_weight_handle(w),
            generation: sys::weightd_weight_generation(w),
            key,
            digest: slice(sys::weightd_weight_digest(w), sys::weightd_weight_digest_len(w)).to_vec(),
            digest_algorithm: text(sys::weightd_digest_algorithm_name(sys::weightd_weight_digest_algorithm(
                w,
            ))),
        }
    }
}

impl WeightHandle {
    /// Takes ownership of `raw` (a weight just returned to us) and maps it; on failure the
    /// weight is released and the error returned.
    fn adopt(raw: *mut sys::weightd_weight, client: Arc<ClientHandle>) -> Result<WeightHandle> {
        let raw = NonNull::new(raw)
            .ok_or_else(|| Error::local(ErrorCode::Internal, "libweightd returned no weight"))?;
        // SAFETY: `raw` is a live weight we own and nobody else sees yet.
        let info = unsafe { weight_info(raw.as_ptr()) };
        let mut addr: *const c_void = ptr::null();
        // SAFETY: map needs exclusive use of the weight, which we have (just received, not yet
        // shared); `addr` and `e` are valid for writes.
        if let Err(e) = call(|e| unsafe { sys::weightd_weight_map(raw.as_ptr(), &mut addr, e) }) {
            // SAFETY: ours, released once, not used again.
            unsafe { sys::weightd_release(raw.as_ptr()) };
            return Err(e);
        }
        if addr.is_null() && info.nbytes > 0 {
            // SAFETY: as above.
            unsafe { sys::weightd_release(raw.as_ptr()) };
            return Err(Error::local(ErrorCode::Internal, "libweightd mapped a weight at NULL"));
        }
        if usize::try_from(info.nbytes).is_err() {
            // SAFETY: as above.
            unsafe { sys::weightd_release(raw.as_ptr()) };
            return Err(Error::local(ErrorCode::Overflow, "the weight is larger than the address space"));
        }
        Ok(WeightHandle { raw, data: addr as *const u8, info, _client: client })
    }

    pub(crate) fn info(&self) -> &WeightInfo {
        &self.info
    }

    /// The weight's bytes, borrowed for as long as the handle lives.
    pub(crate) fn bytes(&self) -> &[u8] {
        if self.info.nbytes == 0 {
            return &[];
        }
        // SAFETY: `data` is the address weightd_weight_map returned: `nbytes` (checked to fit in
        // usize) readable bytes, mapped PROT_READ until weightd_release, which runs in Drop and
        // so after this borrow of `self` ends. The daemon fills a weight completely before it
        // replies and never writes it again; this process holds only a read-only fd, so the
        // bytes do not change while borrowed.
        unsafe { std::slice::from_raw_parts(self.data, self.info.nbytes as usize) }
    }

    pub(crate) fn share(&self) -> Result<WeightHandle> {
        let mut out: *mut sys::weightd_weight = ptr::null_mut();
        // SAFETY: share takes the weight const and may run concurrently with the accessors,
        // share and dup of the same weight (client.h); outputs valid for writes.
        call(|e| unsafe { sys::weightd_share(self.raw.as_ptr(), &mut out, e) })?;
        WeightHandle::adopt(out, self._client.clone())
    }

    pub(crate) fn dup(&self) -> Result<WeightHandle> {
        let mut out: *mut sys::weightd_weight = ptr::null_mut();
        // SAFETY: as for share.
        call(|e| unsafe { sys::weightd_weight_dup(self.raw.as_ptr(), &mut out, e) })?;
        WeightHandle::adopt(out, self._client.clone())
    }
}

// ------------------------------------------------------------------------------------------
// In-flight requests

pub(crate) struct InflightHandle {
    raw: NonNull<sys::weightd_inflight>,
    client: Arc<ClientHandle>,
}

// SAFETY: client.h: a weightd_inflight is used by one thread at a time and may be handed between
// threads freely. It is not Sync (the raw pointer keeps it so) and every call takes `&mut self`
// or `self`.
unsafe impl Send for InflightHandle {}

impl Drop for InflightHandle {
    fn drop(&mut self) {
        // SAFETY: ours; weightd_inflight_free abandons the request (a weight arriving later is
        // released by the library) and is the handle's last call.
        unsafe { sys::weightd_inflight_free(self.raw.as_ptr()) }
    }
}

impl ClientHandle {
    pub(crate) fn materialize(
        self: &Arc<Self>,
        checkpoint: &str,
        tensor: &str,
        sel: Option<&Selection>,
    ) -> Result<InflightHandle> {
        let (c, t, s) = (cstring(checkpoint)?, cstring(tensor)?, selection(sel)?);
        let mut raw: *mut sys::weightd_inflight = ptr::null_mut();
        // SAFETY: a concurrent-safe call on an open client; the strings and selection are copied
        // during the call; outputs valid for writes.
        call(|e| unsafe {
            sys::weightd_materialize(self.ptr(), c.as_ptr(), t.as_ptr(), sel_ptr(&s), &mut raw, e)
        })?;
        self.inflight(raw)
    }

    pub(crate) fn materialize_recipe(self: &Arc<Self>, r: &RecipeHandle) -> Result<InflightHandle> {
        let mut raw: *mut sys::weightd_inflight = ptr::null_mut();
        // SAFETY: a concurrent-safe call; the recipe is finished, taken const and copied.
        call(|e| unsafe { sys::weightd_materialize_recipe(self.ptr(), r.as_ptr(), &mut raw, e) })?;
        self.inflight(raw)
    }

    fn inflight(self: &Arc<Self>, raw: *mut sys::weightd_inflight) -> Result<InflightHandle> {
        NonNull::new(raw)
            .map(|raw| InflightHandle { raw, client: self.clone() })
            .ok_or_else(|| Error::local(ErrorCode::Internal, "libweightd returned no request"))
    }
}

impl InflightHandle {
    /// Has the weight arrived? Reads replies that are already there, never waits. An error is
    /// the request's own (finish returns the same).
    pub(crate) fn arrived(&mut self) -> Result<bool> {
        let mut w: *const sys::weightd_weight = ptr::null();
        // SAFETY: exclusive use of the handle (`&mut self`); outputs valid for writes. The
        // borrowed weight is not kept: we only look whether it is there.
        call(|e| unsafe { sys::weightd_borrow(self.raw.as_ptr(), &mut w, e) })?;
        Ok(!w.is_null())
    }

    /// Waits for the weight and maps it.
    pub(crate) fn finish(self) -> Result<WeightHandle> {
        let this = ManuallyDrop::new(self);
        // SAFETY: moving the Arc out of a ManuallyDrop that is never used or dropped again.
        let client = unsafe { ptr::read(&this.client) };
        let mut w: *mut sys::weightd_weight = ptr::null_mut();
        // SAFETY: weightd_finish consumes the handle in every case; `this` is never dropped,
        // so it is not freed twice. Outputs valid for writes.
        call(|e| unsafe { sys::weightd_finish(this.raw.as_ptr(), &mut w, e) })?;
        WeightHandle::adopt(w, client)
    }
}

// ------------------------------------------------------------------------------------------
// Units

pub(crate) struct UnitHandle {
    raw: NonNull<sys::weightd_unit>,
    client: Arc<ClientHandle>,
}

// SAFETY: client.h: a weightd_unit is used by one thread at a time and may be handed between
// threads. It is not Sync (the raw pointer keeps it so); calls that change it take `&mut self`.
unsafe impl Send for UnitHandle {}

impl Drop for UnitHandle {
    fn drop(&mut self) {
        // SAFETY: ours; weightd_unit_free unmaps and releases everything, abandons a submitted
        // request, and is the unit's last call. Every slice of its memory borrowed `&self`.
        unsafe { sys::weightd_unit_free(self.raw.as_ptr()) }
    }
}

impl UnitHandle {
    pub(crate) fn new(client: &Arc<ClientHandle>) -> Result<UnitHandle> {
        let mut raw: *mut sys::weightd_unit = ptr::null_mut();
        // SAFETY: a concurrent-safe call on an open client; outputs valid for writes.
        call(|e| unsafe { sys::weightd_unit_new(client.ptr(), &mut raw, e) })?;
        NonNull::new(raw)
            .map(|raw| UnitHandle { raw, client: client.clone() })
            .ok_or_else(|| Error::local(ErrorCode::Internal, "libweightd returned no unit"))
    }

    fn p(&mut self) -> *mut sys::weightd_unit {
        self.raw.as_ptr()
    }

    // SAFETY (for the calls on the unit below that take `&mut self`): exclusive use of the
    // unit; strings are NUL-terminated and arrays read for their length during the call only.

    pub(crate) fn slot(&mut self, name: &str, dtype: Option<Dtype>, shape: &[u64]) -> Result<usize> {
        let n = cstring(name)?;
        let d = dtype.map(|d| cstring(d.name())).transpose()?;
        let u = self.p();
        // SAFETY: see above; dest is NULL (the crate reads memory with weightd_unit_data).
        let i = call(|e| unsafe {
            sys::weightd_unit_slot(
                u,
                n.as_ptr(),
                d.as_ref().map_or(ptr::null(), |d| d.as_ptr()),
                shape.as_ptr(),
                shape.len(),
                ptr::null_mut(),
                e,
            )
        })?;
        Ok(i as usize)
    }

    /// Fills `slot` from `source`, a checkpoint and one of its tensors.
    pub(crate) fn set_tensor(
        &mut self,
        slot: &str,
        source: (&str, &str),
        sel: Option<&Selection>,
    ) -> Result<()> {
        let (n, c, t, s) = (cstring(slot)?, cstring(source.0)?, cstring(source.1)?, selection(sel)?);
        let u = self.p();
        // SAFETY: see above.
        call(|e| unsafe {
            sys::weightd_unit_set_tensor(u, n.as_ptr(), c.as_ptr(), t.as_ptr(), sel_ptr(&s), e)
        })?;
        Ok(())
    }

    pub(crate) fn set_recipe(&mut self, slot: &str, r: &RecipeHandle) -> Result<()> {
        let (n, u) = (cstring(slot)?, self.p());
        // SAFETY: see above; the recipe is copied.
        call(|e| unsafe { sys::weightd_unit_set_recipe(u, n.as_ptr(), r.as_ptr(), e) })?;
        Ok(())
    }

    pub(crate) fn set_alias(&mut self, slot: &str, target: &str) -> Result<()> {
        let (n, t, u) = (cstring(slot)?, cstring(target)?, self.p());
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_unit_set_alias(u, n.as_ptr(), t.as_ptr(), e) })?;
        Ok(())
    }

    pub(crate) fn submit(&mut self) -> Result<()> {
        let u = self.p();
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_unit_submit(u, e) })?;
        Ok(())
    }

    pub(crate) fn poll(&mut self) -> Result<bool> {
        let (u, mut done) = (self.p(), 0);
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_unit_poll(u, &mut done, e) })?;
        Ok(done != 0)
    }

    pub(crate) fn finish(&mut self) -> Result<()> {
        let u = self.p();
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_unit_finish(u, e) })?;
        Ok(())
    }

    pub(crate) fn validate(&mut self) -> Result<()> {
        let u = self.p();
        // SAFETY: see above.
        call(|e| unsafe { sys::weightd_unit_validate(u, e) })?;
        Ok(())
    }

    pub(crate) fn set_populate(&mut self, on: bool) -> Result<()> {
        let u = self.p();
        // SAFETY: see above; only sets a flag validate reads.
        call(|e| unsafe { sys::weightd_unit_set_populate(u, c_int::from(on), e) })?;
        Ok(())
    }

    pub(crate) fn bind(&mut self) {
        let u = self.p();
        // SAFETY: see above; with every dest NULL this stores nothing, and it cannot fail.
        unsafe { sys::weightd_unit_bind(u) }
    }

    pub(crate) fn preflight(&mut self) -> Result<Vec<Output>> {
        let u = self.p();
        let mut f: *mut sys::weightd_inflight = ptr::null_mut();
        // SAFETY: see above; outputs valid for writes.
        call(|e| unsafe { sys::weightd_unit_preflight(u, &mut f, e) })?;
        let mut p: *mut sys::weightd_preflight = ptr::null_mut();
        // SAFETY: `f` is the handle just returned, consumed here in every case.
        call(|e| unsafe { sys::weightd_preflight_finish(f, &mut p, e) })?;
        // SAFETY: on success `p` is ours until weightd_preflight_free; `outputs` holds `count`
        // entries whose strings, shapes and keys (WEIGHTD_DIGEST_LEN bytes or NULL) live as long.
        let out = unsafe {
            slice((*p).outputs, (*p).count)
                .iter()
                .map(|o| {
                    let alias = text(o.alias_of);
                    Output {
                        name: text(o.name),
                        dtype: Dtype::from_name_or_unknown(&text(o.dtype)),
                        shape: slice(o.shape, o.ndim).to_vec(),
                        nbytes: o.nbytes,
                        alias_of: if alias.is_empty() { None } else { Some(alias) },
                        key: if o.key.is_null() {
                            None
                        } else {
                            Some(slice(o.key, sys::WEIGHTD_DIGEST_LEN).to_vec())
                        },
                    }
                })
                .collect()
        };
        // SAFETY: freed once, after the last read.
        unsafe { sys::weightd_preflight_free(p) };
        Ok(out)
    }

    pub(crate) fn slot_names(&self) -> Vec<String> {
        let u = self.raw.as_ptr();
        // SAFETY: const accessors of our unit; `&self` means no call changes it meanwhile (and
        // the unit is not Sync, so no other thread uses it). Names live as long as the unit.
        unsafe {
            (0..sys::weightd_unit_slot_count(u)).map(|i| text(sys::weightd_unit_slot_name(u, i))).collect()
        }
    }

    fn weight_ptr(&self, slot: &str) -> Option<*const sys::weightd_weight> {
        let n = cstring(slot).ok()?;
        // SAFETY: a const accessor of our unit (see slot_names); NULL when the slot has no weight.
        let w = unsafe { sys::weightd_unit_weight(self.raw.as_ptr(), n.as_ptr()) };
        if w.is_null() {
            None
        } else {
            Some(w)
        }
    }

    /// A slot's weight after a successful finish or validate.
    pub(crate) fn weight_info(&self, slot: &str) -> Option<WeightInfo> {
        // SAFETY: the unit's own weight, live while `&self` is borrowed (only `&mut self` calls
        // or Drop can release it).
        self.weight_ptr(slot).map(|w| unsafe { weight_info(w) })
    }

    /// A slot's mapped bytes after a successful validate, borrowed from the unit.
    pub(crate) fn data(&self, slot: &str) -> Option<&[u8]> {
        let w = self.weight_ptr(slot)?;
        // SAFETY: a const accessor of the unit's live weight (see weight_info).
        let n = unsafe { sys::weightd_weight_nbytes(w) };
        let n = usize::try_from(n).ok()?;
        let name = cstring(slot).ok()?;
        // SAFETY: a const accessor of our unit; NULL unless validate succeeded (or for 0 bytes).
        let p = unsafe { sys::weightd_unit_data(self.raw.as_ptr(), name.as_ptr()) } as *const u8;
        if n == 0 {
            return Some(&[]);
        }
        if p.is_null() {
            return None;
        }
        // SAFETY: validate mapped the slot's weight (PROT_READ, MAP_SHARED, its segment checked
        // to cover all `n` bytes); the mapping lives until weightd_unit_free or another
        // submit/validate, all of which need `&mut self` or Drop and so wait for this borrow to
        // end. The daemon never writes a finished weight, and we hold only a read-only fd.
        Some(unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// Another reference to a slot's weight, owned by the caller.
    pub(crate) fn share(&self, slot: &str) -> Result<WeightHandle> {
        let w =
            self.weight_ptr(slot).ok_or_else(|| Error::invalid(format!("slot {slot:?} holds no weight")))?;
        let mut out: *mut sys::weightd_weight = ptr::null_mut();
        // SAFETY: share takes the (live, unit-owned) weight const; outputs valid for writes.
        call(|e| unsafe { sys::weightd_share(w, &mut out, e) })?;
        WeightHandle::adopt(out, self.client.clone())
    }

    pub(crate) fn bytes_read(&self) -> u64 {
        // SAFETY: a const accessor of our unit.
        unsafe { sys::weightd_unit_bytes_read(self.raw.as_ptr()) }
    }
}

// ------------------------------------------------------------------------------------------
// Plain-data helpers

/// `bytes` as `[T]` when aligned and a whole number of elements, else None.
pub(crate) fn cast_slice<T: Element>(bytes: &[u8]) -> Option<&[T]> {
    let size = std::mem::size_of::<T>();
    if bytes.as_ptr() as usize % std::mem::align_of::<T>() != 0 || bytes.len() % size != 0 {
        return None;
    }
    // SAFETY: `Element` is sealed and implemented only for the primitive integers and floats:
    // no padding, no invalid bit pattern, no Drop. The start is aligned for T and the length a
    // whole number of elements (both checked above); the result borrows `bytes`' lifetime, so
    // it is read-only and lives no longer than the memory.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, bytes.len() / size) })
}

/// `bytes` of a weight of `dtype` viewed as `[T]`: checked that `T` is the dtype's element
/// type, that the length is a whole number of elements and that the start is aligned for `T`.
pub(crate) fn typed_view<T: Element>(bytes: &[u8], dtype: Dtype) -> crate::Result<&[T]> {
    let size = std::mem::size_of::<T>();
    if !T::DTYPES.contains(&dtype) {
        return Err(crate::Error::local(
            crate::ErrorCode::DtypeMismatch,
            format!(
                "a {} weight cannot be viewed as [{}] (that takes {:?})",
                dtype,
                std::any::type_name::<T>(),
                T::DTYPES
            ),
        ));
    }
    if bytes.len() % size != 0 {
        return Err(crate::Error::local(
            crate::ErrorCode::ByteCountMismatch,
            format!("{} bytes are not a whole number of {}-byte elements", bytes.len(), size),
        ));
    }
    cast_slice(bytes).ok_or_else(|| {
        crate::Error::invalid(format!(
            "the weight's memory is not aligned for [{}]",
            std::any::type_name::<T>()
        ))
    })
}

/// A value set at most once, readable by reference afterwards: what a `Materialization` keeps
/// its arrived weight in, so that `weight(&self)` can hand out `&Weight`. Not Sync (UnsafeCell).
pub(crate) struct OnceSlot<T> {
    value: UnsafeCell<Option<T>>,
}

impl<T> OnceSlot<T> {
    pub(crate) fn new() -> OnceSlot<T> {
        OnceSlot { value: UnsafeCell::new(None) }
    }

    pub(crate) fn get(&self) -> Option<&T> {
        // SAFETY: the only write (in `set`) happens while the slot is None, when no reference
        // into it exists; once Some, the value is never written, moved or dropped before the
        // slot is (which needs ownership). The slot is not Sync: no other thread races.
        unsafe { (*self.value.get()).as_ref() }
    }

    /// Stores `v` unless a value is there already (then `v` is dropped); returns the value.
    pub(crate) fn set(&self, v: T) -> &T {
        if self.get().is_none() {
            // SAFETY: the slot is None, so no reference into it was handed out (get returns
            // references only to a Some value); not Sync, so no other thread is in here.
            unsafe { *self.value.get() = Some(v) };
        }
        self.get().expect("set")
    }

    pub(crate) fn into_inner(self) -> Option<T> {
        self.value.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_check_dtype_length_and_alignment() {
        let words = [1.5f32.to_bits(), 2.5f32.to_bits(), 0];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        // a Vec<u8> from the allocator is aligned for f32 in practice; find an aligned start
        let start = (0..4).find(|i| typed_view::<f32>(&bytes[*i..*i + 8], Dtype::F32).is_ok()).unwrap();
        let v = typed_view::<f32>(&bytes[start..start + 8], Dtype::F32).unwrap();
        assert_eq!(v.len(), 2);
        let misaligned = &bytes[start + 1..start + 9];
        assert_eq!(
            typed_view::<f32>(misaligned, Dtype::F32).unwrap_err().code(),
            crate::ErrorCode::InvalidArgument
        );
        assert_eq!(
            typed_view::<f32>(&bytes[start..start + 6], Dtype::F32).unwrap_err().code(),
            crate::ErrorCode::ByteCountMismatch
        );
        assert_eq!(
            typed_view::<u16>(&bytes[start..start + 8], Dtype::F32).unwrap_err().code(),
            crate::ErrorCode::DtypeMismatch
        );
        assert_eq!(typed_view::<u16>(&bytes[start..start + 8], Dtype::BF16).unwrap().len(), 4);
    }
}
