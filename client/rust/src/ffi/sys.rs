// SPDX-License-Identifier: Apache-2.0
//! libweightd's C declarations, written by hand from `weightd/client.h` and `weightd/error.h`
//! (a test below checks the structs' layouts against the C compiler's).
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int};

pub const WEIGHTD_DIGEST_LEN: usize = 32;

#[repr(C)]
pub struct weightd_error {
    pub code: c_int,
    pub node: u32,
    pub axis: i32,
    pub expected: i64,
    pub actual: i64,
    pub checkpoint: [c_char; 128],
    pub tensor: [c_char; 256],
    pub slot: [c_char; 256],
    pub message: [c_char; 768],
}

macro_rules! opaque {
    ($($n:ident),*) => {$(
        #[repr(C)]
        pub struct $n {
            _private: [u8; 0],
        }
    )*};
}
opaque!(weightd_client, weightd_selection, weightd_recipe, weightd_weight, weightd_inflight, weightd_unit);

#[repr(C)]
pub struct weightd_server_info {
    pub protocol_version: u32,
    pub server_version: *const c_char,
    pub instance: *const c_char,
    pub max_frame_bytes: u32,
    pub max_pending_requests: u32,
    pub max_unit_entries: u32,
    pub max_recipe_nodes: u32,
    pub max_client_bytes: u64,
    pub max_client_weights: u32,
    pub min_protocol_version: u32,
    pub max_protocol_version: u32,
    pub max_queue_fds: u32,
    pub idle_timeout_ms: u64,
    pub frame_timeout_ms: u64,
    pub max_message_bytes: u64,
    pub segment_max_bytes: u64,
    pub max_client_segments: u32,
    pub max_uid_segments: u32,
    pub max_uid_weights: u32,
}

#[repr(C)]
pub struct weightd_source_info {
    pub name: *const c_char,
    pub kind: *const c_char,
    pub path: *const c_char,
    pub tensors: u64,
    pub bytes: u64,
    pub generation: u64,
    pub state: *const c_char,
    pub error: *const c_char,
    pub files: u32,
}

#[repr(C)]
pub struct weightd_source_list {
    pub count: usize,
    pub sources: *const weightd_source_info,
    pub health: *const weightd_source_health,
}

#[repr(C)]
pub struct weightd_source_health {
    pub required: c_int,
    pub preload: c_int,
    pub preloaded: c_int,
    pub admit_failures: u32,
    pub retry_in_ms: u64,
}

#[repr(C)]
pub struct weightd_tensor_info {
    pub name: *const c_char,
    pub dtype: *const c_char,
    pub ndim: usize,
    pub shape: *const u64,
    pub nbytes: u64,
    pub offset: u64,
    pub file: *const c_char,
    pub block_elems: u32,
    pub block_bytes: u32,
}

#[repr(C)]
pub struct weightd_meta_entry {
    pub key: *const c_char,
    pub value: *const c_char,
    pub type_: *const c_char,
}

#[repr(C)]
pub struct weightd_remote_object {
    pub url: *const c_char,
    pub size: u64,
    pub etag: *const c_char,
    pub version: *const c_char,
}

#[repr(C)]
pub struct weightd_description {
    pub source: weightd_source_info,
    pub n_tensors: usize,
    pub tensors: *const weightd_tensor_info,
    pub n_metadata: usize,
    pub metadata: *const weightd_meta_entry,
    pub location: *const c_char,
    pub n_objects: usize,
    pub objects: *const weightd_remote_object,
    pub credentials: *const c_char,
    pub credentials_key_id: *const c_char,
    pub credentials_expires: i64,
}

#[repr(C)]
pub struct weightd_weight_status {
    pub handle: u64,
    pub label: *const c_char,
    pub dtype: *const c_char,
    pub ndim: usize,
    pub shape: *const u64,
    pub nbytes: u64,
    pub refs: u32,
    pub clients: u32,
    pub generation: u64,
    pub digest: *const u8,
    pub source: *const c_char,
    pub adopted: c_int,
    pub segment: u64,
    pub offset: u64,
    pub digest_algorithm: c_int,
    pub digest_len: usize,
}

#[repr(C)]
pub struct weightd_segment_status {
    pub id: u64,
    pub name: *const c_char,
    pub size: u64,
    pub weights: u32,
    pub held: u32,
    pub source: *const c_char,
    pub adopted: c_int,
    pub filling: c_int,
}

#[repr(C)]
pub struct weightd_source_stats {
    pub resident_bytes: u64,
    pub held_bytes: u64,
    pub materialized_bytes: u64,
    pub clients: u64,
    pub errors: u64,
}

#[repr(C)]
pub struct weightd_source_remote {
    pub bytes: u64,
    pub requests: u64,
    pub retries: u64,
    pub errors: u64,
}

#[repr(C)]
pub struct weightd_job_status {
    pub key: *const u8,
    pub label: *const c_char,
    pub nbytes: u64,
    pub done: u64,
}

#[repr(C)]
pub struct weightd_status {
    pub instance: *const c_char,
    pub server_version: *const c_char,
    pub uptime_ms: u64,
    pub bytes_resident: u64,
    pub budget_bytes: u64,
    pub weights: u64,
    pub clients: u64,
    pub bytes_read: u64,
    pub materializations: u64,
    pub materializations_failed: u64,
    pub materializations_in_flight: u64,
    pub evictions: u64,
    pub readoptions: u64,
    pub bytes_materialized: u64,
    pub materialize_ns: u64,
    pub references: u64,
    pub n_sources: usize,
    pub sources: *const weightd_source_info,
    pub n_weights: usize,
    pub weight_list: *const weightd_weight_status,
    pub n_jobs: usize,
    pub jobs: *const weightd_job_status,
    pub foreign_segments: u64,
    pub clients_refused: u64,
    pub clients_timed_out: u64,
    pub partial_frame_bytes: u64,
    pub temp_bytes: u64,
    pub segments: u64,
    pub segment_bytes: u64,
    pub idle_weights: u64,
    pub idle_segments: u64,
    pub n_segments: usize,
    pub segment_list: *const weightd_segment_status,
    pub digest_algorithm: c_int,
    pub digest_chunk_bytes: u64,
    pub requests: u64,
    pub requests_deferred: u64,
    pub source_stats: *const weightd_source_stats,
    pub source_remote: *const weightd_source_remote,
    pub segment_dir: *const c_char,
    pub segment_page_bytes: u64,
    pub segment_huge_bytes: u64,
    pub locked_weights: u64,
    pub locked_bytes: u64,
    pub health_known: c_int,
    pub ready: c_int,
    pub not_ready: *const c_char,
    pub source_health: *const weightd_source_health,
    pub admissions_failed: u64,
    pub admission_retries: u64,
    pub job_elapsed_ms: *const u64,
}

#[repr(C)]
pub struct weightd_event {
    pub checkpoint: *const c_char,
    pub generation: u64,
    pub what: *const c_char,
}

#[repr(C)]
pub struct weightd_event_list {
    pub count: usize,
    pub events: *const weightd_event,
    pub dropped: u64,
}

#[repr(C)]
pub struct weightd_output_info {
    pub name: *const c_char,
    pub dtype: *const c_char,
    pub ndim: usize,
    pub shape: *const u64,
    pub nbytes: u64,
    pub alias_of: *const c_char,
    pub key: *const u8,
}

#[repr(C)]
pub struct weightd_preflight {
    pub count: usize,
    pub outputs: *const weightd_output_info,
}

type E = weightd_error;

/// Recipe nodes that join `n` inputs along `axis` share one C signature: declared once for both.
macro_rules! join_fns {
    ($($name:ident),*) => {
        #[link(name = "weightd")]
        extern "C" {
            $(pub fn $name(r: *mut weightd_recipe, axis: c_int, inputs: *const c_int, n: usize, err: *mut E) -> c_int;)*
        }
    };
}
join_fns!(weightd_recipe_concat, weightd_recipe_stack);

#[link(name = "weightd")]
extern "C" {
    pub fn weightd_code_name(code: c_int) -> *const c_char;
    pub fn weightd_version() -> *const c_char;

    pub fn weightd_connect(
        socket_path: *const c_char,
        client_name: *const c_char,
        ret: *mut *mut weightd_client,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_close(c: *mut weightd_client);
    pub fn weightd_server(c: *const weightd_client) -> *const weightd_server_info;

    pub fn weightd_list(c: *mut weightd_client, ret: *mut *mut weightd_source_list, err: *mut E) -> c_int;
    pub fn weightd_source_list_free(l: *mut weightd_source_list);
    pub fn weightd_describe(
        c: *mut weightd_client,
        checkpoint: *const c_char,
        ret: *mut *mut weightd_description,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_description_free(d: *mut weightd_description);
    pub fn weightd_status_get(c: *mut weightd_client, ret: *mut *mut weightd_status, err: *mut E) -> c_int;
    pub fn weightd_status_summary(
        c: *mut weightd_client,
        ret: *mut *mut weightd_status,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_status_free(s: *mut weightd_status);
    pub fn weightd_poll_events(
        c: *mut weightd_client,
        timeout_ms: c_int,
        ret: *mut *mut weightd_event_list,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_event_list_free(l: *mut weightd_event_list);

    pub fn weightd_selection_full(ret: *mut *mut weightd_selection, err: *mut E) -> c_int;
    pub fn weightd_selection_range(
        axis: u32,
        start: u64,
        end: u64,
        ret: *mut *mut weightd_selection,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_selection_indices(
        axis: u32,
        indices: *const u64,
        n: usize,
        ret: *mut *mut weightd_selection,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_selection_elements(
        start: u64,
        end: u64,
        shape: *const u64,
        ndim: usize,
        ret: *mut *mut weightd_selection,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_selection_shard(
        axis: u32,
        rank: u32,
        world: u32,
        ret: *mut *mut weightd_selection,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_selection_free(s: *mut weightd_selection);

    pub fn weightd_recipe_new(ret: *mut *mut weightd_recipe, err: *mut E) -> c_int;
    pub fn weightd_recipe_free(r: *mut weightd_recipe);
    pub fn weightd_recipe_source(
        r: *mut weightd_recipe,
        checkpoint: *const c_char,
        tensor: *const c_char,
        sel: *const weightd_selection,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_recipe_select(
        r: *mut weightd_recipe,
        input: c_int,
        sel: *const weightd_selection,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_recipe_reshape(
        r: *mut weightd_recipe,
        input: c_int,
        shape: *const u64,
        ndim: usize,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_recipe_transpose(
        r: *mut weightd_recipe,
        input: c_int,
        perm: *const u32,
        n: usize,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_recipe_cast(
        r: *mut weightd_recipe,
        input: c_int,
        dtype: *const c_char,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_recipe_view(
        r: *mut weightd_recipe,
        input: c_int,
        dtype: *const c_char,
        shape: *const u64,
        ndim: usize,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_recipe_dequant_block(
        r: *mut weightd_recipe,
        input: c_int,
        scale: c_int,
        block: *const u64,
        nblock: usize,
        dtype: *const c_char,
        err: *mut E,
    ) -> c_int;

    pub fn weightd_weight_offset(w: *const weightd_weight) -> u64;
    pub fn weightd_weight_segment(w: *const weightd_weight) -> u64;
    pub fn weightd_weight_name(w: *const weightd_weight) -> *const c_char;
    pub fn weightd_weight_dtype(w: *const weightd_weight) -> *const c_char;
    pub fn weightd_weight_ndim(w: *const weightd_weight) -> usize;
    pub fn weightd_weight_shape(w: *const weightd_weight) -> *const u64;
    pub fn weightd_weight_nbytes(w: *const weightd_weight) -> u64;
    pub fn weightd_weight_digest(w: *const weightd_weight) -> *const u8;
    pub fn weightd_weight_digest_len(w: *const weightd_weight) -> usize;
    pub fn weightd_weight_digest_algorithm(w: *const weightd_weight) -> c_int;
    pub fn weightd_digest_algorithm_name(a: c_int) -> *const c_char;
    pub fn weightd_weight_key(w: *const weightd_weight) -> *const u8;
    pub fn weightd_weight_handle(w: *const weightd_weight) -> u64;
    pub fn weightd_weight_generation(w: *const weightd_weight) -> u64;
    pub fn weightd_weight_map(
        w: *mut weightd_weight,
        ret: *mut *const std::os::raw::c_void,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_share(w: *const weightd_weight, ret: *mut *mut weightd_weight, err: *mut E) -> c_int;
    pub fn weightd_weight_dup(w: *const weightd_weight, ret: *mut *mut weightd_weight, err: *mut E) -> c_int;
    pub fn weightd_release(w: *mut weightd_weight);

    pub fn weightd_materialize(
        c: *mut weightd_client,
        checkpoint: *const c_char,
        tensor: *const c_char,
        sel: *const weightd_selection,
        ret: *mut *mut weightd_inflight,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_materialize_recipe(
        c: *mut weightd_client,
        r: *const weightd_recipe,
        ret: *mut *mut weightd_inflight,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_finish(f: *mut weightd_inflight, ret: *mut *mut weightd_weight, err: *mut E) -> c_int;
    pub fn weightd_borrow(f: *mut weightd_inflight, ret: *mut *const weightd_weight, err: *mut E) -> c_int;
    pub fn weightd_inflight_free(f: *mut weightd_inflight);

    pub fn weightd_unit_new(c: *mut weightd_client, ret: *mut *mut weightd_unit, err: *mut E) -> c_int;
    pub fn weightd_unit_slot(
        u: *mut weightd_unit,
        name: *const c_char,
        dtype: *const c_char,
        shape: *const u64,
        ndim: usize,
        dest: *mut *mut std::os::raw::c_void,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_unit_set_tensor(
        u: *mut weightd_unit,
        slot: *const c_char,
        checkpoint: *const c_char,
        tensor: *const c_char,
        sel: *const weightd_selection,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_unit_set_recipe(
        u: *mut weightd_unit,
        slot: *const c_char,
        r: *const weightd_recipe,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_unit_set_alias(
        u: *mut weightd_unit,
        slot: *const c_char,
        target: *const c_char,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_unit_submit(u: *mut weightd_unit, err: *mut E) -> c_int;
    pub fn weightd_unit_poll(u: *mut weightd_unit, ret_done: *mut c_int, err: *mut E) -> c_int;
    pub fn weightd_unit_finish(u: *mut weightd_unit, err: *mut E) -> c_int;
    pub fn weightd_unit_validate(u: *mut weightd_unit, err: *mut E) -> c_int;
    pub fn weightd_unit_set_populate(u: *mut weightd_unit, on: c_int, err: *mut E) -> c_int;
    pub fn weightd_unit_bind(u: *mut weightd_unit);
    pub fn weightd_unit_free(u: *mut weightd_unit);
    pub fn weightd_unit_slot_count(u: *const weightd_unit) -> usize;
    pub fn weightd_unit_slot_name(u: *const weightd_unit, i: usize) -> *const c_char;
    pub fn weightd_unit_weight(u: *const weightd_unit, slot: *const c_char) -> *const weightd_weight;
    pub fn weightd_unit_data(u: *const weightd_unit, slot: *const c_char) -> *const std::os::raw::c_void;
    pub fn weightd_unit_bytes_read(u: *const weightd_unit) -> u64;
    pub fn weightd_unit_preflight(
        u: *mut weightd_unit,
        ret: *mut *mut weightd_inflight,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_preflight_finish(
        f: *mut weightd_inflight,
        ret: *mut *mut weightd_preflight,
        err: *mut E,
    ) -> c_int;
    pub fn weightd_preflight_free(p: *mut weightd_preflight);
}

#[cfg(test)]
mod tests {
    //! The hand-written struct layouts against the C compiler's, from the real header.
    use super::*;
    use std::mem::size_of;
    use std::process::Command;

    #[test]
    fn struct_sizes_match_client_h() {
        let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../include");
        let dir = std::env::temp_dir().join(format!("weightd-rust-layout.{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("sizes.c");
        let names = [
            "weightd_error",
            "weightd_server_info",
            "weightd_source_info",
            "weightd_source_list",
            "weightd_tensor_info",
            "weightd_meta_entry",
            "weightd_remote_object",
            "weightd_description",
            "weightd_weight_status",
            "weightd_segment_status",
            "weightd_source_stats",
            "weightd_source_remote",
            "weightd_job_status",
            "weightd_status",
            "weightd_output_info",
            "weightd_preflight",
            "weightd_event",
            "weightd_event_list",
        ];
        let mut c = String::from("#include <stdio.h>\n#include <weightd/client.h>\nint main(void) {\n");
        for n in names {
            c += &format!("printf(\"%zu %zu\\n\", sizeof({n}), _Alignof({n}));\n");
        }
        c += "return 0; }\n";
        std::fs::write(&src, c).unwrap();
        let exe = dir.join("sizes");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let st = Command::new(cc).arg("-I").arg(include).arg(&src).arg("-o").arg(&exe).status().unwrap();
        assert!(st.success());
        let out = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let got: Vec<(usize, usize)> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let mut it = l.split(' ').map(|x| x.parse().unwrap());
                (it.next().unwrap(), it.next().unwrap())
            })
            .collect();
        macro_rules! rust {
            ($($t:ty),*) => { vec![$((size_of::<$t>(), std::mem::align_of::<$t>())),*] };
        }
        let want = rust!(
            weightd_error,
            weightd_server_info,
            weightd_source_info,
            weightd_source_list,
            weightd_tensor_info,
            weightd_meta_entry,
            weightd_remote_object,
            weightd_description,
            weightd_weight_status,
            weightd_segment_status,
            weightd_source_stats,
            weightd_source_remote,
            weightd_job_status,
            weightd_status,
            weightd_output_info,
            weightd_preflight,
            weightd_event,
            weightd_event_list
        );
        for ((n, g), w) in names.iter().zip(&got).zip(&want) {
            assert_eq!(g, w, "{n}: C (size, align) vs Rust");
        }
        assert_eq!(got.len(), names.len());
    }
}
