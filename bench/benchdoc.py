"""What the benchmark scripts write their results with: the machine's CPU
name for the header, and the Markdown page, written and printed."""
import platform


def cpu_name():
    """The CPU's model name (/proc/cpuinfo), else the architecture."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def write_doc(path, lines):
    """Writes the page's lines to `path` and prints them."""
    text = "\n".join(lines)
    with open(path, "w") as f:
        f.write(text)
    print(text)
