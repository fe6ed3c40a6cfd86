/* The zygote's loop in C: sandbox/isolated/zygote.py has the protocol and the Python loop it
 * replaces.
 *
 * Why C: after every fork all of the zygote's pages are shared with the child, so every page
 * the zygote writes afterwards is a copy-on-write fault. The Python loop allocates and frees
 * objects and writes reference counts as it goes: a fault, and the CPU it costs, for every
 * page it writes, in every execution (docs/benchmarks.md, sandbox section). This loop writes
 * only its stack. It runs as PID 1 of the worker's PID namespace (the only place zygote.py
 * uses it: without a namespace the sweep reads /proc, and stays in Python), holds the GIL
 * throughout (the process has one thread) and returns to Python only in a new child, with the
 * child's three descriptors, or at the end.
 *
 * Built on first use by sandbox/trusted/native_build.py with the host's C compiler: where none
 * is found the zygote runs the Python loop, which does the same, only dearer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define JOB_FDS 5 /* job pipe (read end), value and output pipes (write ends), and for a split
                   * job's two processes their call pipes' ends (sandbox/isolated/split.py) */
#define GRACE_POLLS 100 /* a child that closed its value pipe gets up to 100 x 1 ms to end */

/* One message from the server and up to JOB_FDS descriptors (extra ones are closed).
 * Returns the message length: 0 when the server's end is closed, -1 on error (errno). */
static ssize_t receive(int ctl, char *buf, size_t len, int *fds, int *nfds) {
    union {
        char bytes[CMSG_SPACE(JOB_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {buf, len};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.bytes;
    msg.msg_controllen = sizeof control.bytes;
    ssize_t n;
    do {
        n = recvmsg(ctl, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    *nfds = 0;
    if (n < 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (*nfds < JOB_FDS)
                fds[(*nfds)++] = fd;
            else
                close(fd);
        }
    }
    return n;
}

static void close_all(const int *fds, int nfds) {
    for (int i = 0; i < nfds; i++) close(fds[i]);
}

/* reaping.kill_namespace: SIGKILL everything else in the namespace and reap it all, again
 * until the kill finds no one (a fork may complete while the first one is delivered). Sets
 * *status to main's wait status if it is reaped here; returns whether it was. */
static int kill_namespace(pid_t main_pid, int *status) {
    int found = 0;
    while (kill(-1, SIGKILL) == 0) {
        for (;;) {
            int st;
            pid_t pid = waitpid(-1, &st, 0);
            if (pid < 0) {
                if (errno == EINTR) continue;
                break; /* ECHILD: nothing left to reap */
            }
            if (pid == main_pid) {
                *status = st;
                found = 1;
            }
        }
    }
    return found;
}

/* zygote._sweep in a namespace: with grace, give main up to GRACE_POLLS ms to end on its own,
 * so the signal that really ended it is reported; then kill and reap everything. */
static void sweep(pid_t main_pid, int grace, int *has_status, int *status, int *ours) {
    *has_status = 0;
    *status = 0;
    *ours = 1;
    if (grace) {
        for (int i = 0; i < GRACE_POLLS; i++) {
            pid_t pid = waitpid(main_pid, status, WNOHANG);
            if (pid == main_pid) {
                *has_status = 1;
                *ours = 0;
                break;
            }
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    int killed_status = 0;
    if (kill_namespace(main_pid, &killed_status) && !*has_status) {
        *has_status = 1;
        *status = killed_status;
    }
}

static void put_le32(char *out, int32_t value) {
    uint32_t v = (uint32_t)value;
    for (int i = 0; i < 4; i++) out[i] = (char)((v >> (8 * i)) & 0xff);
}

static PyObject *serve(PyObject *Py_UNUSED(module), PyObject *arg) {
    int ctl = PyLong_AsLong(arg);
    if (ctl == -1 && PyErr_Occurred()) return NULL;
    pid_t main_pid = -1;
    for (;;) {
        char buf[16];
        int fds[JOB_FDS];
        int nfds;
        ssize_t n = receive(ctl, buf, sizeof buf, fds, &nfds);
        if (n < 0) return PyErr_SetFromErrno(PyExc_OSError);
        if (n == 0) {
            close_all(fds, nfds);
            Py_RETURN_NONE;
        }
        /* "R": the execution's (main) child; "r": another of its processes (a split job's
         * tests), swept with it but not the one whose ending is reported */
        if ((buf[0] == 'R' || buf[0] == 'r') && (nfds == 3 || nfds == JOB_FDS)) {
            PyOS_BeforeFork();
            pid_t pid = fork();
            if (pid == 0) {
                PyOS_AfterFork_Child();
                PyObject *tuple = PyTuple_New(nfds);
                for (int i = 0; tuple && i < nfds; i++)
                    PyTuple_SET_ITEM(tuple, i, PyLong_FromLong(fds[i]));
                return tuple;
            }
            PyOS_AfterFork_Parent();
            close_all(fds, nfds);
            if (buf[0] == 'R') main_pid = pid;
            if (pid < 0) send(ctl, "F", 1, MSG_NOSIGNAL);
            continue;
        }
        close_all(fds, nfds); /* "K" + grace byte; anything else is treated as "K" too */
        int has_status = 0, status = 0, ours = 1;
        if (main_pid > 0) sweep(main_pid, n > 1 && buf[1] == '1', &has_status, &status, &ours);
        main_pid = -1;
        char reply[13] = {'S'}; /* zygote.STATUS: "<iii" */
        put_le32(reply + 1, has_status);
        put_le32(reply + 5, has_status ? status : 0);
        put_le32(reply + 9, ours);
        send(ctl, reply, sizeof reply, MSG_NOSIGNAL);
    }
}

static PyMethodDef methods[] = {
    {"serve", serve, METH_O,
     "serve(ctl_fd) -> (job_r, val_w, out_w[, call_in, call_out]) in a new child, None once "
     "the server has gone."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_zygote",
    .m_doc = "The zygote's loop in C (see sandbox/isolated/zygote.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__zygote(void) { return PyModule_Create(&module); }
