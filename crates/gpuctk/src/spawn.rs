//! Starting the runtime as a child that dies with us: the one call that waits for the runtime
//! instead of becoming it (`delete` of a container with a runtime record, see `passthrough`).
//!
//! std's `Command` can set `PR_SET_PDEATHSIG` only in a `pre_exec` closure, which makes it fork:
//! a copy of our page tables, and copy-on-write faults in both processes until the child execs.
//! That cost a `delete` 0.26 ms of CPU more than the other pass-through calls. Here the child
//! shares our memory until it execs, as `posix_spawn` does (`clone` with `CLONE_VM |
//! CLONE_VFORK`: we are suspended meanwhile), on a stack of its own, and makes only raw system
//! calls before `execve`.

use std::ffi::{c_char, c_int, c_void, CString, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};

extern "C" {
    /// The environment, as std's `Command` passes it on when it is not changed.
    static environ: *const *const c_char;
}

/// What the child reads, and where it leaves the `execve` error, in our memory.
struct Child {
    program: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    parent: c_int,
    /// The errno of a failed `execve` (0: it did not fail).
    errno: AtomicI32,
}

/// Stack of the child until it execs, on ours (as musl's `posix_spawn` has it): it makes a
/// handful of calls. (A heap buffer this large would cost a fresh arena's zeroed pages.)
const STACK: usize = 16 << 10;

/// Runs `program` (as `argv[0]` too) with `args` and our environment, stdio and descriptors, as
/// a child that gets `SIGKILL` when we die (an engine that kills a runtime it timed out kills
/// us, and the runtime goes with us, as it would had we exec'd it), and waits for it. In the
/// child, as std's `Command` does: `SIGPIPE` back to its default, no signal blocked.
pub fn run_tied(program: &Path, args: &[OsString]) -> io::Result<ExitStatus> {
    let cstr = |b: &[u8]| CString::new(b).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let program = cstr(program.as_os_str().as_bytes())?;
    let args = args
        .iter()
        .map(|a| cstr(a.as_bytes()))
        .collect::<io::Result<Vec<_>>>()?;
    let mut argv: Vec<*const c_char> = Vec::with_capacity(args.len() + 2);
    argv.push(program.as_ptr());
    argv.extend(args.iter().map(|a| a.as_ptr()));
    argv.push(std::ptr::null());
    let mut stack = std::mem::MaybeUninit::<[u8; STACK]>::uninit();
    #[allow(unsafe_code)]
    // SAFETY: `child` makes only system calls, reads what `Child` points to (alive until we
    // return: `CLONE_VFORK` suspends us until it has exec'd or exited) and writes only its
    // atomic; every signal is blocked while it runs on our memory, so no handler of ours runs
    // there; its stack is `stack`, 16-aligned at its top, which outlives it (nothing reads the
    // bytes the child left there).
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let mut child = Child {
            program: program.as_ptr(),
            argv: argv.as_ptr(),
            envp: environ,
            parent: libc::getpid(),
            errno: AtomicI32::new(0),
        };
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut mask);
        let top = stack.as_mut_ptr().cast::<u8>().add(STACK);
        let top = top.sub(top as usize % 16);
        let pid = libc::clone(
            start,
            top.cast::<c_void>(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut child).cast::<c_void>(),
        );
        let spawn_errno = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
        if pid == -1 {
            return Err(spawn_errno);
        }
        match child.errno.load(Ordering::Relaxed) {
            0 => pid,
            e => {
                wait(pid)?;
                return Err(io::Error::from_raw_os_error(e));
            }
        }
    };
    wait(pid)
}

/// The child's status, once it has exited.
fn wait(pid: c_int) -> io::Result<ExitStatus> {
    let pid = rustix::process::Pid::from_raw(pid).ok_or(io::ErrorKind::InvalidInput)?;
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => return Ok(ExitStatus::from_raw(status.as_raw())),
            // Without WNOHANG, waitpid returns only with a status.
            Ok(None) => return Err(io::ErrorKind::Other.into()),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The child, on its own stack in our memory (see [`run_tied`]).
#[allow(unsafe_code)]
extern "C" fn start(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `Child`, alive while the parent is suspended (CLONE_VFORK);
    // only system calls follow, none of which allocates or takes a lock.
    unsafe {
        let child = &*arg.cast::<Child>();
        let kill = Some(rustix::process::Signal::KILL);
        if let Err(e) = rustix::process::set_parent_process_death_signal(kill) {
            failed(child, e.raw_os_error());
        }
        // Our parent is suspended until we exec: it cannot have died before the death signal
        // was set, unless killed outright, and then no one waits for us.
        if libc::getppid() != child.parent {
            libc::_exit(127);
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(child.program, child.argv, child.envp);
        failed(child, *libc::__errno_location())
    }
}

/// Leave `errno` for the parent and exit.
#[allow(unsafe_code)]
fn failed(child: &Child, errno: c_int) -> ! {
    child.errno.store(errno.max(1), Ordering::Relaxed);
    // SAFETY: `_exit` ends the child without running anything of the parent's.
    unsafe { libc::_exit(127) }
}
