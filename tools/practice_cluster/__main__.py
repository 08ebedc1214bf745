"""python -m practice_cluster start|stop [--force]|status|env (tools/ on the path), or
python tools/practice_cluster ...: see __init__.py."""
import sys
from pathlib import Path

if not __package__:  # run as a folder, python tools/practice_cluster: tools/ on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from practice_cluster import __doc__ as USAGE  # noqa: E402
from practice_cluster import daemons, holders  # noqa: E402
from practice_cluster.config import CLUSTERS, STATE  # noqa: E402


def main(args):
    cmd = args[0] if args else "status"
    try:
        if cmd == "start":
            daemons.start(holder=holders.HAND)
            for c in CLUSTERS.values():
                print(f"{c['name']}: nodes {', '.join(c['node']['names'])}; "
                      f"partitions {', '.join(p['name'] for p in c['partition'])}; projects {', '.join(c['accounts'])}")
            print(f"to use it: source {STATE / 'env.sh'}")
        elif cmd == "stop" and args[1:] == ["--force"]:
            daemons.stop()
        elif cmd == "stop" and not args[1:]:
            left = daemons.release(holders.HAND)
            if left:  # a test run that is still going, say
                print(f"local cluster left running: still used by {', '.join(left)} (stop --force stops it anyway)")
        elif cmd == "status":
            print("running" if daemons.running() else "not running")
            return 0 if daemons.running() else 1
        elif cmd == "env":
            print((STATE / "env.sh").read_text(), end="")
        else:
            print(USAGE)
            return 0 if cmd in ("-h", "--help", "help") else 2
    except daemons.ClusterError as e:
        print(f"practice_cluster: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
