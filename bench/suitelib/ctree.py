"""A generated C source tree for the parallel-build benchmark: `files`
modules, each a .c with its own header and including a few others and a
shared header, a main that calls every module, and a Makefile with header
dependencies. The program prints a sum the generator knows in advance."""

import os

MAKEFILE = """\
CC = cc
CFLAGS = -O1 -Wall -Iinclude
SRCS = $(wildcard src/*.c)
OBJS = $(SRCS:src/%.c=obj/%.o)

prog: $(OBJS)
\t$(CC) -o $@ $(OBJS)

obj/%.o: src/%.c | obj
\t$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

obj:
\tmkdir -p obj

clean:
\trm -rf obj prog

.PHONY: clean
-include $(OBJS:.o=.d)
"""

COMMON_H = """\
#ifndef COMMON_H_
#define COMMON_H_
#include <stddef.h>
#include <stdint.h>
#include <string.h>
struct record {
  uint64_t key;
  char name[32];
  double weight;
  struct record* next;
};
static inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}
#define SQUARE(x) ((x) * (x))
#endif
"""

FUNCS = 8  # functions per module; module i returns sum_j j*(j+1) + FUNCS*i


def module_value(i):
    return sum(j * (j + 1) for j in range(FUNCS)) + FUNCS * i


def expected_output(files):
    return f"sum={sum(module_value(i) for i in range(files))}"


def _module(i, files):
    deps = sorted({(i * 7 + 1) % files, (i * 13 + 5) % files, (i + 1) % files} - {i})
    inc = "".join(f'#include "mod{d:04d}.h"\n' for d in deps)
    funcs = []
    for j in range(FUNCS):
        funcs.append(f"""
static int f{j}(int x) {{
  struct record r;
  memset(&r, 0, sizeof(r));
  r.key = mix((uint64_t)x + {j});
  r.weight = (double)SQUARE(x) / (double)(r.key % 7 + 1);
  int acc = 0;
  for (int k = 0; k <= x; ++k) acc += 1 + (int)(r.key % 1);
  return x * acc; /* x * (x + 1) */
}}
""")
    body = " + ".join(f"f{j}({j})" for j in range(FUNCS))
    return (f'#include "common.h"\n#include "mod{i:04d}.h"\n{inc}' + "".join(funcs) +
            f"\nint mod{i:04d}_run(void) {{\n  return {body} + {FUNCS} * {i};\n}}\n")


def generate(root, files):
    """Writes the tree under root (created); returns root."""
    for d in ("src", "include"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "Makefile"), "w") as f:
        f.write(MAKEFILE)
    with open(os.path.join(root, "include", "common.h"), "w") as f:
        f.write(COMMON_H)
    for i in range(files):
        with open(os.path.join(root, "include", f"mod{i:04d}.h"), "w") as f:
            f.write(f"#ifndef MOD{i:04d}_H_\n#define MOD{i:04d}_H_\n"
                    f"int mod{i:04d}_run(void);\n#endif\n")
        with open(os.path.join(root, "src", f"mod{i:04d}.c"), "w") as f:
            f.write(_module(i, files))
    calls = "".join(f"  sum += mod{i:04d}_run();\n" for i in range(files))
    decls = "".join(f"int mod{i:04d}_run(void);\n" for i in range(files))
    with open(os.path.join(root, "src", "main.c"), "w") as f:
        f.write(f"#include <stdio.h>\n{decls}int main(void) {{\n  long sum = 0;\n{calls}"
                f'  printf("sum=%ld\\n", sum);\n  return 0;\n}}\n')
    return root
