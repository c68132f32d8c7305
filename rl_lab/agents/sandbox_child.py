"""What the Python tool's child process runs: it builds the sandbox, then runs the model's code.

`rl_lab.agents.python_tool` passes this file's text to a fresh `python -I -S -X utf8 -c` (so the
file need not be readable by the sandbox user), with two arguments: a JSON settings object and the
model's code.  It is never imported.  Order (see python_tool's docstring for what each step buys):

  root?        -> become the unprivileged user first (setgroups, setgid, setuid)
  namespaces:  unshare(user, mount, PID, network, IPC, UTS, cgroup) -> map uid/gid -> fork:
               the parent (outside the new PID namespace) only waits and passes the exit status on;
               the child is PID 1 of the namespace: when it exits, the kernel kills every process
               left in it.  The child makes every mount read-only, puts a size-capped tmpfs on /tmp
               (the work folder) and a fresh /proc, drops all capabilities, sets no_new_privs and a
               seccomp filter (no processes, threads, exec, sockets, sessions, device nodes, ptrace,
               mounts or namespaces: those calls fail with EPERM).
  unsandboxed: (only with SandboxLimits.allow_unsandboxed) as root its own network namespace and
               the user switch; otherwise nothing but the limits and the audit hook.
  both:        rlimits, the audit hook (a lint that gives readable refusals, not a boundary), exec.

If a step of the set-up fails, the code never runs: the process prints `sandbox setup failed at
<step>: <error>` and exits with SETUP_FAILED.
"""
import json
import os
import resource
import signal
import sys
import traceback

SETUP_FAILED = 121
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x2000000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 38
SYS_MOUNT_SETATTR, SYS_CAPSET, AT_FDCWD, AT_RECURSIVE = 442, 126, -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
AUDIT_ARCH_X86_64 = 0xC000003E
# x86_64 system calls the sandboxed code may not make (numbers from asm/unistd_64.h):
DENIED_SYSCALLS = {
    "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59, "execveat": 322,   # processes, threads
    "socket": 41, "socketpair": 53, "connect": 42, "bind": 49, "listen": 50, "accept": 43, "accept4": 288,
    "setsid": 112, "setpgid": 109, "mknod": 133, "mknodat": 259,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kill": 62, "tkill": 200, "tgkill": 234,
    "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "pidfd_open": 434, "pidfd_send_signal": 424,
    "pidfd_getfd": 438, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "mount_setattr": 442,
    "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "unshare": 272, "setns": 308, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
    "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
    "quotactl": 179, "name_to_handle_at": 303, "open_by_handle_at": 304}


def fail(step, exc):
    print(f"sandbox setup failed at {step}: {exc}", file=sys.stderr, flush=True)
    os._exit(SETUP_FAILED)


def step(name, func, *args):
    try:
        return func(*args)
    except Exception as exc:          # any failure: the code must not run without the isolation
        fail(name, exc)


def main(settings, code):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name in settings["preload"]:
        __import__(name)
    mode, uid, gid = settings["mode"], settings["uid"], settings["gid"]
    if mode == "namespaces":
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        if uid >= 0:
            step("switch to the sandbox user", become, uid, gid)
            step("dumpable", prctl, libc, PR_SET_DUMPABLE, 1)   # a setuid() made /proc/self/uid_map root's: take it back
        step("user and other namespaces", enter_namespaces, libc)
        pid = os.fork()
        if pid:
            supervise(pid)                    # never returns
        step("parent-death signal", prctl, libc, PR_SET_PDEATHSIG, signal.SIGKILL)
        step("mounts", make_mounts, libc, settings)
        os.chdir("/tmp")
        set_limits(settings)
        step("capabilities", drop_capabilities, libc)
        step("seccomp", install_seccomp, libc, ctypes)
        del sys.modules["ctypes"], libc, ctypes
    else:
        if settings["isolate_network"] and os.geteuid() == 0:
            import ctypes
            step("network namespace", check, ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET), ctypes)
            del sys.modules["ctypes"]
        if uid >= 0:
            step("switch to the sandbox user", become, uid, gid)
        set_limits(settings)
        resource.setrlimit(resource.RLIMIT_NPROC, (settings["nproc"], settings["nproc"]))
    if settings["hook"]:
        disable_unaudited()
        sys.addaudithook(make_hook(os.path.realpath(os.getcwd()), frozenset(sys.modules)))
    return code


def check(result, ctypes):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def prctl(libc, option, value):
    import ctypes
    check(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), ctypes)


def become(uid, gid):
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def enter_namespaces(libc):
    import ctypes
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
    check(libc.unshare(flags), ctypes)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def supervise(pid):
    """Outside the new PID namespace: wait for its PID 1 and die the way it died."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status))


def make_mounts(libc, settings):
    import ctypes
    import struct
    mount = libc.mount
    check(mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), ctypes)
    attr = ctypes.create_string_buffer(struct.pack("QQQQ", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                                                   0, 0, 0))
    check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, attr, 32), ctypes)
    options = f"size={settings['folder_bytes']},nr_inodes={settings['folder_files']},mode=0700".encode()
    check(mount(b"tmpfs", b"/tmp", b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), options), ctypes)
    # a /proc that shows only this namespace's processes; where the kernel refuses (a container that
    # masks parts of its own /proc), an empty read-only folder instead
    if mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY), None) != 0:
        check(mount(b"tmpfs", b"/proc", b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY),
                    b"size=4k,nr_inodes=1"), ctypes)


def set_limits(settings):
    cpu = settings["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (settings["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (settings["file_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (settings["open_files"],) * 2)


def drop_capabilities(libc):
    """capset(2) with empty sets: the namespace's root keeps its uid but loses every privilege in it."""
    import ctypes
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)       # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()                       # effective, permitted, inheritable (x2): empty
    check(libc.syscall(SYS_CAPSET, header, data), ctypes)
    prctl(libc, PR_SET_NO_NEW_PRIVS, 1)


def seccomp_program():
    """A classic BPF program: kill any non-x86_64 call (e.g. int 0x80), deny x32 calls and the listed
    calls with EPERM, allow the rest.  Each instruction is (code, jump if true, jump if false, k)."""
    import struct
    ld_word, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
    numbers = sorted(set(DENIED_SYSCALLS.values()))
    n = len(numbers)
    # layout: 0 load arch; 1 arch?; 2 load nr; 3 x32?; 4..4+n-1 denied?; 4+n allow; 5+n deny; 6+n kill
    program = [(ld_word, 0, 0, 4), (jeq, 1, 0, AUDIT_ARCH_X86_64), (ret, 0, 0, kill), (ld_word, 0, 0, 0),
               (jge, n + 1, 0, 0x40000000)]
    for i, number in enumerate(numbers):
        program.append((jeq, n - i, 0, number))
    program += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program), len(program)


def install_seccomp(libc, ctypes):
    if os.uname().machine != "x86_64":
        raise OSError(f"no seccomp filter for {os.uname().machine} (this module knows x86_64's system calls)")
    code, length = seccomp_program()

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
    prog = SockFprog(length, code)
    check(libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(2), ctypes.byref(prog), 0, 0), ctypes)


def disable_unaudited():
    """Functions that change the system but raise no audit event are replaced by a refusal."""
    import posix

    def refuse(name):
        def refused(*args, **kwargs):
            raise PermissionError(f"sandbox: {name} is not allowed")
        return refused
    for module, names in ((os, ("mkfifo", "mknod", "pidfd_open", "chroot", "setpriority", "sched_setaffinity")),
                          (posix, ("mkfifo", "mknod", "pidfd_open", "chroot", "setpriority", "sched_setaffinity")),
                          (signal, ("pidfd_send_signal",))):
        for name in names:
            if hasattr(module, name):
                setattr(module, name, refuse(f"{module.__name__}.{name}"))


def make_hook(work, preloaded):
    """The audit hook (PEP 578): refuses, with a message the model can read, what the OS layer stops
    anyway in namespaces mode.  Code can get around it (it is Python, in the same interpreter): it
    is a lint, not a boundary."""
    import posixpath
    realpath, fsdecode, isabs = posixpath.realpath, os.fsdecode, posixpath.isabs
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    denied = {"os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.kill",
              "os.killpg", "os.setsid", "subprocess.Popen", "signal.pthread_kill", "resource.setrlimit",
              "resource.prlimit", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
              "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "pty.spawn"}
    # event: (positions of the paths it changes, positions of its dir_fd arguments)
    path_events = {"os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
                   "os.rename": ((0, 1), (2, 3)), "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)),
                   "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.truncate": ((0,), ()),
                   "os.utime": ((0,), (3,)), "os.chflags": ((0,), ()), "os.lchflags": ((0,), ()),
                   "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()), "shutil.rmtree": ((0,), (1,))}

    def inside(path):
        if not isinstance(path, (str, bytes)) and not hasattr(path, "__fspath__"):
            return False
        real = realpath(fsdecode(path))
        return real == work or real.startswith(work + "/")

    def hook(event, args):
        if event in denied or event.startswith("socket.") or event.startswith("ctypes."):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args[0] not in preloaded:
            raise PermissionError(f"sandbox: module {args[0]!r} is not available (preloaded: math, fractions, "
                                  f"itertools, re, json, ...)")
        if event == "open":
            path, mode, flags = args
            if isinstance(path, int) or not (flags & write_flags):
                return
            if mode is None and not isabs(fsdecode(path)):   # os.open: its dir_fd is not in the event
                raise PermissionError("sandbox: os.open for writing needs an absolute path")
            if not inside(path):
                raise PermissionError(f"sandbox: writing outside the working directory ({path!r})")
        elif event in path_events:
            paths, dir_fds = path_events[event]
            if any(i < len(args) and args[i] not in (None, -1) for i in dir_fds) or \
                    any(not inside(args[i]) for i in paths):
                raise PermissionError(f"sandbox: {event} outside the working directory")
    return hook


if __name__ == "__main__":
    _code = main(json.loads(sys.argv[1]), sys.argv[2])
    sys.argv[1:] = []
    try:
        exec(compile(_code, "<tool>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit:
        raise
    except BaseException as _exc:
        try:
            sys.stdout.flush()
        except BaseException:
            pass
        traceback.print_exception(type(_exc), _exc, _exc.__traceback__.tb_next)
        sys.stderr.flush()
        os._exit(1)
