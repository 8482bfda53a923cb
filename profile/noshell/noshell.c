/*
 * noshell.so: the desktop profile's LD_PRELOAD shim (docs/agents.md).
 *
 * The X server compiles its keymap by running
 *     execl("/bin/sh", "sh", "-c", "\"/usr/bin/xkbcomp\" -w 1 ... \"-\" ...", NULL)
 * (os/utils.c, Popen), so an Xvfb under nsgate would need a shell in the
 * exec allowlist. This shim replaces execl: a "/bin/sh -c COMMAND" whose
 * COMMAND is a plain command line (words, "double" or 'single' quoted,
 * backslash escapes; no other shell syntax) starting with a program named
 * xkbcomp is executed directly, with those words as its argv. Anything
 * else, a command with shell syntax included, goes to execve unchanged
 * (and the exec guard refuses the shell). No shell runs for the keymap.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

#define MAXARGS 128

/* split parses cmd into words in buf (at least strlen(cmd)+1 bytes);
 * returns the number of words, or -1 when cmd holds shell syntax that a
 * plain split would get wrong. */
static int split(const char *cmd, char *buf, char **words, int max)
{
	int n = 0;
	const char *p = cmd;
	char *o = buf;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0')
			break;
		if (n >= max - 1)
			return -1;
		words[n++] = o;
		while (*p && *p != ' ' && *p != '\t') {
			if (*p == '"') {
				p++;
				while (*p && *p != '"') {
					if (*p == '$' || *p == '`')
						return -1;
					if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
						p++;
					*o++ = *p++;
				}
				if (*p != '"')
					return -1;
				p++;
			} else if (*p == '\'') {
				p++;
				while (*p && *p != '\'')
					*o++ = *p++;
				if (*p != '\'')
					return -1;
				p++;
			} else if (*p == '\\' && p[1]) {
				p++;
				*o++ = *p++;
			} else if (strchr("|&;<>()$`*?[]#~{}!\n", *p)) {
				return -1;
			} else {
				*o++ = *p++;
			}
		}
		*o++ = '\0';
	}
	words[n] = NULL;
	return n;
}

static int is_xkbcomp(const char *path)
{
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	return strcmp(b, "xkbcomp") == 0;
}

int execl(const char *path, const char *arg, ...)
{
	char *argv[MAXARGS];
	int argc = 0;
	va_list ap;
	argv[argc++] = (char *)arg;
	va_start(ap, arg);
	while (arg != NULL) {
		if (argc >= MAXARGS) {
			va_end(ap);
			errno = E2BIG;
			return -1;
		}
		arg = va_arg(ap, const char *);
		argv[argc++] = (char *)arg;
	}
	va_end(ap);

	if (argc == 4 && strcmp(argv[1], "-c") == 0 &&
	    (strcmp(path, "/bin/sh") == 0 || strcmp(path, "/usr/bin/sh") == 0)) {
		size_t len = strlen(argv[2]);
		char *buf = malloc(len + 1);
		char *words[MAXARGS];
		if (buf != NULL) {
			int n = split(argv[2], buf, words, MAXARGS);
			if (n > 0 && is_xkbcomp(words[0]) && strchr(words[0], '/') != NULL)
				return execve(words[0], words, environ);
			free(buf);
		}
	}
	return execve(path, argv, environ);
}
