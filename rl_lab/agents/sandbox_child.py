"""What the Python tool's child process runs: it builds the sandbox, then runs the model's code.

`rl_lab.agents.python_tool` passes this file's text to a fresh `python -I -S -X utf8 -c` (so the
file need not be readable by the sandbox user) with a JSON settings object as its argument, then
the model's code as a second argument when it is short, or on stdin when it is longer than an
argument may be.  It is never imported.  Order (see python_tool's docstring for what each step buys):

  first:       close every descriptor but stdin, stdout/stderr (the output) and the status pipe
               (the caller's other descriptors would let the code write past every check below,
               which look at paths only when a file is opened); read the code from stdin if it
               came there, and put /dev/null in its place
  root?        -> become the unprivileged user first (setgroups, setgid, setuid)
  namespaces:  unshare(user, mount, PID, network, IPC, UTS, cgroup) -> map uid/gid -> fork:
               the parent (outside the new PID namespace) only waits and passes the exit status on;
               the child is PID 1 of the namespace: when it exits, the kernel kills every process
               left in it.  The child makes every mount read-only, puts a size-capped tmpfs on /tmp
               (the work folder) and a fresh /proc, drops all capabilities, sets no_new_privs,
               Landlock (writes only beneath /tmp, where the kernel has it) and a seccomp filter
               (no processes, threads, exec, sockets, sessions, device nodes, ptrace, mounts,
               namespaces, SysV IPC, AIO, fallocate, inotify, file locks or leases: those calls fail
               with EPERM).
  unsandboxed: (only with SandboxLimits.allow_unsandboxed) as root its own network namespace and
               the user switch; no_new_privs and Landlock (writes only beneath the call's folder)
               where the kernel has it; otherwise nothing but the limits and the audit hook.
  both:        rlimits, the audit hook (a lint that gives readable refusals, not a boundary),
               "ready" on the status pipe, which is then closed, and exec.

The status pipe is the parent's channel: the code never holds it, so it cannot forge what the
parent reads there.  If a step of the set-up fails, the code never runs: the process writes
`sandbox setup failed at <step>: <error>` on the status pipe and exits with SETUP_FAILED.
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
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_RULE_PATH_BENEATH = 1
# Landlock's rights that change the file system, by the ABI version that brought them
# (linux/landlock.h).  Reading and executing are not among them: reading is not enforced (the
# docstring of python_tool says so), exec is denied by the seccomp filter.
LANDLOCK_WRITE_RIGHTS = (
    (1, 0x1FF2),    # WRITE_FILE, REMOVE_DIR, REMOVE_FILE, MAKE_CHAR/_DIR/_REG/_SOCK/_FIFO/_BLOCK/_SYM
    (2, 1 << 13),   # REFER: link or rename across folders
    (3, 1 << 14),   # TRUNCATE
    (5, 1 << 15))   # IOCTL_DEV: ioctl on a device opened afterwards
# x86_64 system calls the sandboxed code may not make (numbers from asm/unistd_64.h).  x86_64 has
# no multiplexed `ipc` call (i386's is killed with the rest of int 0x80, see seccomp_program).
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
    "quotactl": 179, "name_to_handle_at": 303, "open_by_handle_at": 304,
    # memory that RLIMIT_AS does not count (a detached segment counts in no process's RSS either)
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
    "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240,
    # host-wide quotas and disk past RLIMIT_FSIZE (fallocate with KEEP_SIZE ignores it)
    "io_setup": 206, "fallocate": 285, "inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300,
    "flock": 73}
SYS_FCNTL = 72
# fcntl commands denied by their argument: locks and leases hold up other processes that use the
# file (a read lock needs only read access), F_NOTIFY watches folders like inotify
DENIED_FCNTL_COMMANDS = {"F_SETLK": 6, "F_SETLKW": 7, "F_OFD_SETLK": 37, "F_OFD_SETLKW": 38,
                         "F_SETLEASE": 1024, "F_NOTIFY": 1026}
STATUS_FD = None                  # the parent's status pipe (settings["status_fd"]) until the code runs


def report(message):
    """Tell the parent on the status pipe, which the code never holds."""
    data = message.encode("utf-8", "replace")
    try:
        os.write(STATUS_FD, data)
    except (OSError, TypeError):      # no pipe (the child run by hand): stderr
        os.write(2, data)


def fail(step, exc):
    report(f"sandbox setup failed at {step}: {exc}\n")
    os._exit(SETUP_FAILED)


def step(name, func, *args):
    try:
        return func(*args)
    except Exception as exc:          # any failure: the code must not run without the isolation
        fail(name, exc)


def close_inherited(keep):
    """Close every descriptor but `keep`.  A descriptor the caller left open without close-on-exec
    would survive every layer below: the read-only mounts and Landlock check a path when a file
    is opened, and this one is open already (a directory's allows creating files beneath it)."""
    try:
        open_fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:                   # no /proc: every number below the limit
        open_fds = range(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    for fd in open_fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass                  # the listing's own descriptor, closed already


def read_code(argv):
    """The code: the second argument, or stdin (code longer than an argument may be); stdin is
    /dev/null afterwards either way, opened now, before the mounts take device nodes away."""
    if len(argv) > 2:
        code = argv[2]
    else:
        chunks = []
        while chunk := os.read(0, 1 << 16):
            chunks.append(chunk)
        code = b"".join(chunks).decode("utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    if null != 0:
        os.dup2(null, 0)
        os.close(null)
    return code


def main(settings):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name in settings["preload"]:
        __import__(name)
    mode, uid, gid = settings["mode"], settings["uid"], settings["gid"]
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if mode == "namespaces":
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
        step("limits", set_limits, settings)
        step("capabilities", drop_capabilities, libc)
        if settings["landlock_abi"] > 0:
            step("Landlock", restrict_writes, libc, settings["landlock_abi"], "/tmp")
        step("seccomp", install_seccomp, libc, ctypes)
    else:
        if settings["isolate_network"] and os.geteuid() == 0:
            step("network namespace", check, libc.unshare(CLONE_NEWNET), ctypes)
        if uid >= 0:
            step("switch to the sandbox user", become, uid, gid)
        step("limits", set_limits, settings)
        resource.setrlimit(resource.RLIMIT_NPROC, (settings["nproc"], settings["nproc"]))
        if settings["landlock_abi"] > 0:
            step("no_new_privs", prctl, libc, PR_SET_NO_NEW_PRIVS, 1)
            step("Landlock", restrict_writes, libc, settings["landlock_abi"], ".")   # its folder: the folders
            # above it may be closed to the sandbox user, who got here by the parent's chdir
    del libc, ctypes
    for name in [name for name in sys.modules if name.split(".")[0] in ("ctypes", "_ctypes")]:
        del sys.modules[name]             # imported again, it meets the audit hook's import check
    if settings["hook"]:
        disable_unaudited()
        sys.addaudithook(make_hook(os.path.realpath(os.getcwd()), frozenset(sys.modules)))


def check(result, ctypes):
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


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
    """Outside the new PID namespace: wait for its PID 1 and die the way it died.  It lets go of
    the status pipe first: only PID 1 reports on it."""
    if STATUS_FD is not None:
        os.close(STATUS_FD)
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


def restrict_writes(libc, abi, folder):
    """Landlock (needs no_new_privs): from here on this process, and whatever it could start, may
    open a file for writing, create, remove, rename, link or truncate only beneath `folder`.  The
    kernel checks it at every open whatever Python the code runs, and for every kind of file: also
    a FIFO on a read-only mount, which the read-only mount lets through.  Not covered: chmod,
    chown, utime and xattrs (no Landlock rights: the read-only mounts stop those), descriptors
    opened before (close_inherited), and reading.  Under ABI 1 the kernel refuses every move of a
    file into another folder, beneath `folder` too (ABI 2's REFER right allows it there)."""
    import ctypes
    import struct
    rights = sum(bits for version, bits in LANDLOCK_WRITE_RIGHTS if abi >= version)
    attr = ctypes.create_string_buffer(struct.pack("=Q", rights))       # landlock_ruleset_attr, ABI 1's size
    ruleset = check(libc.syscall(SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(8), ctypes.c_uint32(0)), ctypes)
    try:
        beneath = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, beneath))   # landlock_path_beneath_attr
            check(libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, rule,
                               ctypes.c_uint32(0)), ctypes)
        finally:
            os.close(beneath)
        check(libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)), ctypes)
    finally:
        os.close(ruleset)


def seccomp_program():
    """A classic BPF program: kill any non-x86_64 call (e.g. int 0x80), deny x32 calls, the listed
    calls and fcntl with a listed command with EPERM, allow the rest.  Returns (bytes, length)."""
    ld_word, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
    fcntl_cmd = 24                    # seccomp_data: nr 0, arch 4, ip 8, args 16 + 8 i (low 32 bits first)
    # rows: (label, code, label to jump to if true, if false, k); None jumps to the next row
    program = [("", ld_word, None, None, 4), ("", jeq, None, "kill", AUDIT_ARCH_X86_64),
               ("", ld_word, None, None, 0), ("", jge, "eperm", None, 0x40000000),
               ("", jeq, "fcntl", None, SYS_FCNTL)]
    program += [("", jeq, "eperm", None, number) for number in sorted(set(DENIED_SYSCALLS.values()))]
    program += [("", ret, None, None, allow), ("fcntl", ld_word, None, None, fcntl_cmd)]
    program += [("", jeq, "eperm", None, command) for command in sorted(DENIED_FCNTL_COMMANDS.values())]
    program += [("", ret, None, None, allow), ("eperm", ret, None, None, eperm), ("kill", ret, None, None, kill)]
    return assemble(program), len(program)


def assemble(program):
    """BPF bytes from rows whose jumps name a label: each becomes the offset from the next row."""
    import struct
    where = {row[0]: i for i, row in enumerate(program) if row[0]}

    def offset(i, label):
        jump = 0 if label is None else where[label] - i - 1
        if not 0 <= jump <= 255:
            raise ValueError(f"seccomp program: a jump of {jump} rows does not fit in a byte")
        return jump
    return b"".join(struct.pack("HBBI", code, offset(i, jt), offset(i, jf), k)
                    for i, (_, code, jt, jf, k) in enumerate(program))


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
    _settings = json.loads(sys.argv[1])
    STATUS_FD = _settings["status_fd"]
    step("descriptors", close_inherited, {0, 1, 2, STATUS_FD})
    _code = step("reading the code", read_code, sys.argv)
    main(_settings)
    sys.argv[1:] = []
    report("ready\n")                 # the parent's sign that the set-up is done and the code runs
    if STATUS_FD is not None:
        os.close(STATUS_FD)
        STATUS_FD = None
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
