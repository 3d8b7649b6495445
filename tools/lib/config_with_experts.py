#!/usr/bin/env python3
"""A model config with another Wukong expert count: config_with_experts.py IN.json OUT.json COUNT.

The config keeps its name, so that the data generator (chosen by the config's name) is the same."""
import json
import sys


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    config = json.load(open(argv[1]))
    config["arch"]["wukong"]["experts"]["count"] = int(argv[3])
    with open(argv[2], "w") as f:
        json.dump(config, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
