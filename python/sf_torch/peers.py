"""Which ranks are gone, after a collective failed: a roll call through the rendezvous store.

A dead peer makes DDP's next collective fail on every survivor with gloo's or NCCL's own words
("Connection closed by peer [127.0.0.1]:28828"), which name an address at best. The survivors
then each write their rank into the job's key-value store (the one `init_process_group`
rendezvoused through) and read which ranks did the same; a rank that does not answer within
`wait_s` is gone (or stalled). Nothing runs until a collective has failed.
"""
import itertools
import time

_calls = itertools.count()


def one_line(e: BaseException) -> str:
    """An exception's message as one line: gloo's carry a wrapper, a source location and a
    Python trace ("Got the following error when running the callback: RuntimeError:
    [./gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:28828\n\nAt: ...")."""
    text = str(e).strip()
    text = text.splitlines()[0] if text else type(e).__name__
    text = text.rsplit("Error: ", 1)[-1]
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    return text


# What gloo and NCCL say when a peer's process is gone (torch 1.13 has no exception type of its
# own for them: a RuntimeError that says something else is the trainer's own error).
_PEER_FAILURES = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Read error",
                  "Write error", "Connection refused", "NCCL communicator was aborted", "remote process exited")


def looks_like_lost_peer(e: BaseException) -> bool:
    """A collective's error that may mean a peer is gone (then ask lost_ranks() who)."""
    return any(s in str(e) for s in _PEER_FAILURES)


def lost_ranks(wait_s: float = 3.0) -> list[int]:
    """After a failed collective: the ranks (sorted) that did not answer a roll call within
    wait_s seconds. [] when every rank answered (the failure was not a lost peer). A store that
    stops answering counts rank 0 as gone: under env:// rendezvous the store lives in rank 0's
    process. Every survivor should call it once, soon after its own failure."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return []
    me, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        return []
    prefix = f"sf_torch/roll_call/{next(_calls)}/"
    seen = {me}
    try:
        store = dist.distributed_c10d._get_default_store()
        store.add(prefix + str(me), 1)
        end = time.monotonic() + wait_s
        while len(seen) < world and time.monotonic() < end:
            # add(key, 0) reads a counter without waiting (and makes it 0 where no rank answered yet).
            seen.update(r for r in range(world) if r not in seen and store.add(prefix + str(r), 0) > 0)
            if len(seen) < world:
                time.sleep(0.05)
    except Exception:  # the store is gone with its process: who answered until then is what we know
        pass
    return sorted(set(range(world)) - seen)
