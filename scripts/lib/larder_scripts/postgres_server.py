"""PostgreSQL from Debian (postgresql-15 or newer) as a foreground child on 127.0.0.1, for the
telemetry integration test and the bench: a new cluster in the work directory (initdb, trust
authentication for a role `larder`), one database, stopped with the test. Run as root, the
server runs as Debian's `postgres` user (PostgreSQL refuses root), which then owns the cluster's
directory."""
import glob
import os
import pwd
import shutil
import signal
import subprocess
import time

import larder_scripts as ls
from larder_scripts import SetupError


def bin_dir():
    """The newest /usr/lib/postgresql/<major>/bin with initdb and postgres."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if not found:
        raise SetupError("PostgreSQL is not installed (Debian package postgresql; scripts/bootstrap installs it)")
    return os.path.dirname(found[-1])


class Postgres:
    def __init__(self, work, database="telemetry", user="larder"):
        self.bin = bin_dir()
        self.dir = os.path.join(work, "postgres")
        self.data = os.path.join(self.dir, "data")
        self.socket = os.path.join(self.dir, "socket")
        self.log = os.path.join(self.dir, "postgres.log")
        self.database = database
        self.user = user
        self.port = None
        self.proc = None
        self.run_as = None
        if os.geteuid() == 0:
            try:
                self.run_as = pwd.getpwnam("postgres")
            except KeyError:
                raise SetupError("running as root, but there is no `postgres` user to run the server as")

    @property
    def url(self):
        return "postgres://%s@127.0.0.1:%d/%s" % (self.user, self.port, self.database)

    def _as_server(self, args, **kw):
        """Runs a PostgreSQL program as the server's user."""
        if self.run_as:
            args = ["runuser", "-u", "postgres", "--"] + args
        return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)

    def start(self):
        os.makedirs(self.socket, exist_ok=True)
        if self.run_as:
            for d in (self.dir, self.socket):
                os.chown(d, self.run_as.pw_uid, self.run_as.pw_gid)
            # The work directory above must be traversable by the server's user.
            parent = os.path.dirname(self.dir)
            os.chmod(parent, os.stat(parent).st_mode | 0o011)
        r = self._as_server([os.path.join(self.bin, "initdb"), "-D", self.data, "-U", self.user, "-A", "trust",
                             "-E", "UTF8", "--no-sync", "--locale=C"])
        if r.returncode != 0:
            raise SetupError("initdb failed:\n" + r.stdout[-2000:])
        for attempt in range(5):
            self.port = ls.free_port()
            args = [os.path.join(self.bin, "postgres"), "-D", self.data, "-p", str(self.port), "-k", self.socket,
                    "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=50"]
            if self.run_as:
                args = ["runuser", "-u", "postgres", "--"] + args
            log = open(self.log, "ab")
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            log.close()
            deadline = time.time() + 15
            while time.time() < deadline and self.proc.poll() is None:
                if self._psql("postgres", "SELECT 1").returncode == 0:
                    r = self._psql("postgres", "CREATE DATABASE %s" % self.database)
                    if r.returncode != 0:
                        raise SetupError("CREATE DATABASE failed:\n" + r.stdout)
                    return
                time.sleep(0.1)
            self.stop()
        with open(self.log, errors="replace") as f:
            raise SetupError("PostgreSQL did not start:\n" + f.read()[-2000:])

    def _psql(self, database, sql):
        psql = os.path.join(self.bin, "psql")
        if not os.path.exists(psql):
            psql = shutil.which("psql") or psql
        return subprocess.run([psql, "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", database,
                               "-v", "ON_ERROR_STOP=1", "-At", "-c", sql],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ls.loopback_env())

    def query(self, sql):
        """Rows of `sql` on the test database, each a list of text cells."""
        r = self._psql(self.database, sql)
        if r.returncode != 0:
            raise SetupError("psql failed: %s\n%s" % (sql, r.stdout))
        return [line.split("|") for line in r.stdout.splitlines() if line]

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        # SIGINT: PostgreSQL's fast shutdown. runuser passes it on.
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
