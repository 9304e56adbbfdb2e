// SPDX-License-Identifier: Apache-2.0
//! A private weightd for this crate's tests, doc examples and example program: its own
//! directory, socket, shared-memory prefix and state directory, ready once it has sent
//! `READY=1` to the `NOTIFY_SOCKET` it was given, stopped (SIGTERM, then SIGKILL after 30 s)
//! and cleaned up when dropped, also while a test panics. The daemon binary is `$WD_WEIGHTD`
//! (set by weightd's ctest), else `weightd` on PATH. Not part of the crate's API.
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::dtype::Dtype;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Waits catch hangs, they do not time the daemon; `$WD_TIME_SCALE` stretches them (slow
/// builds), as for weightd's C tests.
fn time_scale() -> u32 {
    std::env::var("WD_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|k| (1..=100).contains(k))
        .unwrap_or(1)
}

/// A private weightd (see the module's description).
#[derive(Debug)]
pub struct Daemon {
    dir: PathBuf,
    socket: PathBuf,
    prefix: String,
    child: Option<Child>,
}

impl Daemon {
    /// Makes the daemon's directory, where the test writes its checkpoints before `start`.
    pub fn prepare() -> io::Result<Daemon> {
        let base = std::env::temp_dir();
        let pid = std::process::id();
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir = base.join(format!("weightd-rust.{pid}-{n}"));
            match fs::create_dir(&dir) {
                Ok(()) => {
                    return Ok(Daemon {
                        socket: dir.join("weightd.sock"),
                        prefix: format!("wdrs{pid}-{n}"),
                        dir,
                        child: None,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// A daemon serving the sample checkpoint (see [`write_sample`]) as "m".
    pub fn with_sample() -> io::Result<Daemon> {
        let mut d = Daemon::prepare()?;
        let path = d.dir.join("sample.safetensors");
        write_sample(&path)?;
        d.start(&[("m", &path)], "")?;
        Ok(d)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn socket(&self) -> &Path {
        &self.socket
    }
    /// The daemon's shared-memory prefix (its segments are /dev/shm/PREFIX.*).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Writes the configuration (each checkpoint as `[checkpoint:NAME]`; `extra` goes into
    /// `[daemon]`), starts weightd and waits until it is ready.
    pub fn start(&mut self, checkpoints: &[(&str, &Path)], extra: &str) -> io::Result<()> {
        let conf = self.dir.join("weightd.conf");
        let mut text = format!(
            "[daemon]\nsocket = {}\nsocket_mode = 0666\nshm_prefix = {}\nstate_dir = {}/state\nworkers = 2\n{}{}\n\n",
            self.socket.display(),
            self.prefix,
            self.dir.display(),
            if extra.contains("admin_socket") { "" } else { "single_socket = yes\n" },
            extra
        );
        for (name, path) in checkpoints {
            let _ = write!(text, "[checkpoint:{}]\npath = {}\n\n", name, path.display());
        }
        fs::write(&conf, text)?;
        let notify_path = self.dir.join("notify.sock");
        let _ = fs::remove_file(&notify_path);
        let notify = UnixDatagram::bind(&notify_path)?;
        notify.set_read_timeout(Some(Duration::from_millis(100)))?;
        let log = fs::File::create(self.dir.join("weightd.log"))?;
        let exe = std::env::var_os("WD_WEIGHTD").unwrap_or_else(|| "weightd".into());
        let mut cmd = Command::new(&exe);
        cmd.arg("--config")
            .arg(&conf)
            .arg("--foreground")
            .args(["--log-level", "debug"])
            .env("NOTIFY_SOCKET", &notify_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        crate::ffi::die_with_parent(&mut cmd);
        let child =
            cmd.spawn().map_err(|e| io::Error::new(e.kind(), format!("cannot start {exe:?}: {e}")))?;
        self.child = Some(child);

        let end = Instant::now() + Duration::from_secs(30 * u64::from(time_scale()));
        let mut buf = [0u8; 4096];
        loop {
            match notify.recv(&mut buf) {
                Ok(n) => {
                    if String::from_utf8_lossy(&buf[..n]).lines().any(|l| l == "READY=1") {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {}
                Err(e) => return Err(e),
            }
            let exited = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > end {
                let why = match exited {
                    Some(st) => format!("weightd exited ({st})"),
                    None => "weightd did not become ready".to_string(),
                };
                return Err(io::Error::new(io::ErrorKind::Other, format!("{why}:\n{}", self.log())));
            }
        }
    }

    /// Kills the daemon with SIGKILL, as a crash would, and waits for it. Its segments and state
    /// stay for the next `start`.
    pub fn kill(&mut self) -> io::Result<ExitStatus> {
        let mut child = match self.child.take() {
            Some(c) => c,
            None => return Err(io::Error::new(io::ErrorKind::Other, "not running")),
        };
        child.kill()?;
        child.wait()
    }

    /// What the daemon logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("weightd.log")).unwrap_or_default()
    }

    /// Stops the daemon (SIGTERM; SIGKILL if it has not exited after 30 s) and returns how it
    /// exited. The directory stays until the `Daemon` is dropped.
    pub fn stop(&mut self) -> io::Result<ExitStatus> {
        let mut child = match self.child.take() {
            Some(c) => c,
            None => return Err(io::Error::new(io::ErrorKind::Other, "not running")),
        };
        if let Some(st) = child.try_wait()? {
            return Ok(st);
        }
        crate::ffi::terminate(child.id())?;
        let end = Instant::now() + Duration::from_secs(30 * u64::from(time_scale()));
        while Instant::now() < end {
            if let Some(st) = child.try_wait()? {
                return Ok(st);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        child.kill()?;
        child.wait()
    }

    /// The daemon's segments under /dev/shm.
    pub fn segments(&self) -> Vec<PathBuf> {
        let want = format!("{}.", self.prefix);
        fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&want))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop();
        }
        for s in self.segments() {
            let _ = fs::remove_file(s);
        }
        if std::env::var_os("WD_KEEP_TEST_DIR").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Writes a safetensors file: (name, dtype, shape, bytes) in that order.
pub fn write_safetensors(path: &Path, tensors: &[(&str, Dtype, &[u64], &[u8])]) -> io::Result<()> {
    let mut header = String::from("{");
    let mut off = 0usize;
    for (i, (name, dtype, shape, data)) in tensors.iter().enumerate() {
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        let name = name.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = write!(
            header,
            "{}\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            if i > 0 { "," } else { "" },
            name,
            dtype,
            shape.join(","),
            off,
            off + data.len()
        );
        off += data.len();
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = Vec::with_capacity(8 + header.len() + off);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for (_, _, _, data) in tensors {
        out.extend_from_slice(data);
    }
    fs::write(path, out)
}

/// Little-endian bytes of `n` F32 values 0.0, 1.0, 2.0, ...
pub fn f32_counting(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

/// Little-endian bytes of `n` BF16 values 0.0, 1.0, 2.0, ... (exact while n <= 256).
pub fn bf16_counting(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (((i as f32).to_bits() >> 16) as u16).to_le_bytes()).collect()
}

/// The sample checkpoint: "wte" F32 [16, 8], "q" F32 [8, 16], "norm" F32 [16] and "qb" BF16
/// [8, 16], each holding its element indices as values (0, 1, 2, ...).
pub fn write_sample(path: &Path) -> io::Result<()> {
    write_safetensors(
        path,
        &[
            ("wte", Dtype::F32, &[16, 8], &f32_counting(128)),
            ("q", Dtype::F32, &[8, 16], &f32_counting(128)),
            ("norm", Dtype::F32, &[16], &f32_counting(16)),
            ("qb", Dtype::BF16, &[8, 16], &bf16_counting(128)),
        ],
    )
}
