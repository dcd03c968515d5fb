"""Child processes with a log file each, and how they are stopped."""

import subprocess
import time

from .errors import HarnessError


def tail_log(path, n=4000):
    """The last n characters of a log ("" if it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def stop_process(popen, timeout=15):
    """SIGTERM, then SIGKILL if it lingers `timeout` s; returns the exit code."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(timeout=timeout)
    return popen.returncode


def kill9(popen, timeout=30):
    """SIGKILL and wait; returns the exit code."""
    if popen.poll() is None:
        popen.kill()
    popen.wait(timeout=timeout)
    return popen.returncode


class Proc:
    """argv started now, stdout and stderr appended to log_path (a restarted
    process keeps one log). new_session: in a session of its own, so a
    terminal's Ctrl-C reaches only the Python process, which then tears
    down in order (the bench does this)."""

    def __init__(self, name, argv, log_path, new_session=False, header=False):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        with open(log_path, "a") as log:
            if header:
                log.write(f"=== {time.strftime('%H:%M:%S')} start: {' '.join(argv)}\n")
                log.flush()
            self.popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL,
                                          start_new_session=new_session)

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def check_alive(self):
        """HarnessError with the end of its log if it has exited."""
        if not self.alive():
            raise HarnessError(f"{self.name} exited with {self.popen.returncode}: "
                               f"{tail_log(self.log_path, 2000)}")

    def stop(self, timeout=15):
        return stop_process(self.popen, timeout)

    def kill9(self):
        return kill9(self.popen)
