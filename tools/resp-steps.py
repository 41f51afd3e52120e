"""Splits a server's perf samples into steps (tools/bench-resp-steps.sh).

    perf script -i FILE -F comm,tid,ip,sym --inline | python3 tools/resp-steps.py uuidmap|redis

Each sample goes to exactly one step: the first step in RULES (in order)
with a frame of the sample's stack (any depth, inlined frames included)
matching one of its patterns. So a step listed earlier takes its samples
even when they happen inside a later one (the index lookup inside the
command, the eventfd write of a wake-up inside tokio), and the rows add up
to 100 %. Prints "share-in-percent<TAB>step" lines, in RULES order, then
"N<TAB>samples".
"""
import re
import sys

# (step, patterns). Kernel frames are the syscall entry points
# (`__x64_sys_*`) or the interrupt entries; user frames are demangled Rust
# paths or Redis's C functions.
# Samples in the kernel's system call entry and exit, outside any one
# call's own function (some calls' own frame is not on the stack: Redis's
# `read` and `write` show as `ksys_read`, `ksys_write`).
SYSCALL_ENTRY = ("system call entry and exit, outside a call's own function",
                 [r"^do_syscall_64$", r"^entry_SYSCALL_64"])

RULES = {
    "uuidmap": [
        ("interrupts (timer, IPIs) that hit the process",
         [r"^asm_sysvec_", r"^asm_common_interrupt$"]),
        ("task wake-ups: the IO driver waking the connection task, a worker unparking another",
         [r"ScheduledIo>?::wake", r"^tokio::runtime::task::waker::wake_by_(val|ref)",
          r"^mio::sys::unix::waker::.*Waker::wake", r"notify_parked", r"::unpark",
          r"^tokio::runtime::scheduler::multi_thread::worker::.*schedule"]),
        ("read: `recv` and tokio's read (`poll_read`, readiness)",
         [r"^__x64_sys_recvfrom$", r"poll_read_priv", r"^<tokio::io::util::read_buf::ReadBuf"]),
        ("write: `send` (with the loopback delivery to the client) and tokio's write",
         [r"^__x64_sys_sendto$", r"poll_write_priv", r"^<tokio::io::util::write_all::WriteAll"]),
        ("tokio: wait for events (`epoll_wait`)", [r"^__x64_sys_epoll_wait$"]),
        ("tokio: park a worker (`futex` wait)", [r"^__x64_sys_futex$"]),
        ("other system calls", [r"^__x64_sys_"]),
        SYSCALL_ENTRY,
        ("admission: the permit (LIFO semaphore) and its deadline",
         [r"lifo_semaphore", r"^uuidmap_server::admission", r"wait_from_now", r"bound_wait",
          r"^uuidmap_server::deadline"]),
        ("the read gate (`admit_read`: linearizable at once)", [r"at_once", r"ReadGate", r"read_gate"]),
        ("index lookup (`Index::get`)", [r"^uuidmap_index::"]),
        ("parse (`parser::parse`)", [r"^uuidmap_resp::parser::"]),
        ("the key: 36 characters to a UUID (`parse_key`)",
         [r"parse_key", r"^uuidmap_resp::uuid_arg", r"^uuidmap_server::wire::key"]),
        ("reply encode (`reply::uuid`)", [r"^uuidmap_resp::reply::"]),
        ("metrics: the command's clock, counter and histogram",
         [r"metrics", r"quanta", r"Instant>::(now|elapsed)", r"clock_gettime"]),
        ("the command's other work: name lookup, arity, role, dispatch (`Commands::execute`)",
         [r"^uuidmap_resp::command", r"^uuidmap_resp::commands::"]),
        ("the connection loop: buffers, `select!`, the stop watch (`connection::serve`)",
         [r"^uuidmap_resp::connection::", r"^uuidmap_resp::accept", r"^\{async_fn#0\}<tokio::net::tcp"]),
        ("tokio: scheduler, task polls, the IO and timer drivers",
         [r"^tokio::", r"^mio::", r"^<tokio::", r"^<mio::"]),
        ("other (allocator, kernel outside calls, frames not unwound)", [r""]),
    ],
    "redis": [
        ("interrupts (timer, IPIs) that hit the process",
         [r"^asm_sysvec_", r"^asm_common_interrupt$"]),
        ("read: `read` syscall", [r"^__x64_sys_read$", r"^ksys_read$"]),
        ("write: `write` syscall (with the loopback delivery to the client)",
         [r"^__x64_sys_write$", r"^ksys_write$"]),
        ("wait for events (`epoll_wait`)", [r"^__x64_sys_epoll_wait$"]),
        ("other system calls", [r"^__x64_sys_"]),
        SYSCALL_ENTRY,
        ("the command: lookup (`lookupKey`, `dictFind`)", [r"^lookupKey", r"^dict"]),
        ("the command: the rest (`call`, `getGenericCommand`, the reply)",
         [r"^call$", r"^getGenericCommand$", r"^addReply", r"^lookupCommand", r"^processCommand$"]),
        ("read handler: parse and buffers (`readQueryFromClient`, not in `read`)",
         [r"^readQueryFromClient$", r"^processInputBuffer$", r"^processMultibulkBuffer$"]),
        ("write handler, not in `write` (`writeToClient`)",
         [r"^handleClientsWithPendingWrites$", r"^writeToClient$", r"^_writeToClient$"]),
        ("event loop and the rest (`aeMain`, `beforeSleep`, allocator, frames not named)", [r""]),
    ],
}


def samples(lines):
    stack = []
    for line in lines:
        if not line.strip():
            if stack:
                yield stack
            stack = []
        elif line[0] in " \t":
            parts = line.split(None, 1)
            if len(parts) == 2:
                stack.append(parts[1].strip().removesuffix(" (inlined)"))
        # else: the sample's header line (comm, tid)
    if stack:
        yield stack


def main():
    rules = [(name, [re.compile(p) for p in pats]) for name, pats in RULES[sys.argv[1]]]
    counts = {name: 0 for name, _ in rules}
    total = 0
    for stack in samples(sys.stdin):
        total += 1
        for name, pats in rules:
            if any(p.search(f) for f in stack for p in pats):
                counts[name] += 1
                break
    for name, _ in rules:
        print(f"{100.0 * counts[name] / max(total, 1):.2f}\t{name}")
    print(f"{total}\tsamples")


main()
