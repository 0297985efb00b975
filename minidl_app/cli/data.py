"""``minidl data download NAME [--dir DIR]`` and ``minidl data where NAME [--data-dir DIR]``."""

from minidl.data.catalog import DATASETS, get_spec
from minidl.data.download import URL_ENV, download
from minidl.data.locate import locate


def add_data_arguments(parser):
    """The ``download`` and ``where`` actions of ``minidl data``."""
    actions = parser.add_subparsers(dest="data_action", metavar="ACTION", required=True)
    text = "download a dataset (SHA-256 checked) into the cache or --dir"
    get = actions.add_parser("download", help=text)
    get.add_argument("name", choices=sorted(DATASETS))
    target = "target folder (default: ~/.cache/minidl/NAME)"
    get.add_argument("--dir", "--data-dir", dest="dir", help=target)
    mirror = f"base URL of a mirror (default: ${URL_ENV} or the official one)"
    get.add_argument("--url", help=mirror)
    where = actions.add_parser("where", help="print the folder a dataset is loaded from")
    where.add_argument("name", choices=sorted(DATASETS))
    where.add_argument("--data-dir", help="the only folder looked in when given")


def run_data(args):
    """Run the chosen action (a failure is a user error: one line, exit status 1)."""
    if args.data_action == "download":
        print(download(args.name, args.dir, base_url=args.url, log=print))
    else:
        print(locate(get_spec(args.name), args.data_dir))
    return 0
