// SPDX-License-Identifier: Apache-2.0
//! Process control for `testing::Daemon`: SIGTERM, and a daemon that dies with its test.
use std::io;
use std::os::raw::c_int;

extern "C" {
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn prctl(option: c_int, ...) -> c_int;
}

const SIGTERM: c_int = 15;
const PR_SET_PDEATHSIG: c_int = 1;

/// Sends SIGTERM to `pid`.
pub(crate) fn terminate(pid: u32) -> io::Result<()> {
    let pid = c_int::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { kill(pid, SIGTERM) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the spawned process get SIGTERM when the thread that spawned it dies, so a test that
/// is killed does not leave its daemon behind.
pub(crate) fn die_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2), a
    // single system call that is async-signal-safe, allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(|| {
            if prctl(PR_SET_PDEATHSIG, SIGTERM as std::os::raw::c_ulong) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
