#!/usr/bin/env python3
"""scripts/check_size.py on small sources whose functions are known (build.check_size_scanner)."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_size  # noqa: E402


def body(n):
    return "".join(f"  x += {i};\n" for i in range(n))


class Scanner(unittest.TestCase):
    def spans(self, text):
        return [(name, last - first + 1) for name, first, last in check_size.functions(check_size.strip_code(text))]

    def test_plain_member_template_kernel_and_lambda(self):
        src = ("#include <x>\n#define M(a) { a; }\nnamespace a { namespace {\n"
               "int f(int x) {\n" + body(3) + "  return x;\n}\n"
               "}  // namespace\n"
               "template <class T>\nstruct S : B<T> {\n  void g() const { if (1) { h(); } }\n};\n"
               "template <typename T>\nT S2<T>::run(const T& v) noexcept {\n" + body(5) + "}\n"
               "__global__ void __launch_bounds__(256) kern(float* p) {\n" + body(2) + "}\n"
               "const auto lam = [](int v) {\n  return v;\n};\n"
               "static const int table[] = {1, 2,\n 3};\n"
               "extern \"C\" {\nvoid c_api(void) {\n}\n}\n"
               "}  // namespace a\n")
        self.assertEqual(self.spans(src), [("f", 6), ("g", 1), ("S2<T>::run", 7), ("kern", 4), ("(lambda)", 3),
                                           ("c_api", 2)])

    def test_call_inside_an_attribute_is_not_the_name(self):
        # __launch_bounds__'s argument may call a constexpr function: the kernel is named after the attribute
        src = ("template <int G>\n__global__ void __launch_bounds__(G > 0 ? small_threads(G) : 256, 1) "
               "lse_kernel(Args a) {\n" + body(2) + "}\n")
        self.assertEqual(self.spans(src), [("lse_kernel", 4)])

    def test_braces_in_comments_strings_and_chars_are_ignored(self):
        src = ("void f() {\n  const char* s = \"}}{\";  // }\n  char c = '}';\n  /* {\n } */\n"
               "  auto r = R\"x(\n}\n)x\";\n  const char* e = \"\\\"}\";\n}\nvoid g() {\n}\n")
        self.assertEqual(self.spans(src), [("f", 10), ("g", 2)])

    def test_constructor_with_initializer_list(self):
        src = "Foo::Foo(int a)\n    : a_(a), b_(2) {\n" + body(4) + "}\n"
        self.assertEqual(self.spans(src), [("Foo::Foo", 6)])

    def test_limits_and_exit_code(self):
        with tempfile.TemporaryDirectory() as d:
            ok = os.path.join(d, "ok.cpp")
            with open(ok, "w") as f:
                f.write("int f() {\n" + body(98) + "}\n")  # 100 lines: at the limit
            long_fn = os.path.join(d, "long.cpp")
            with open(long_fn, "w") as f:
                f.write("int f() {\n" + body(99) + "}\n")  # 101 lines
            long_file = os.path.join(d, "big.h")
            with open(long_file, "w") as f:
                f.write("// line\n" * 601)
            script = os.path.join(ROOT, "scripts", "check_size.py")
            r = subprocess.run([sys.executable, script, ok], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout)
            r = subprocess.run([sys.executable, script, ok, long_fn, long_file], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("long.cpp:1: function f has 101 lines (limit 100)", r.stdout)
            self.assertIn("big.h: file has 601 lines (limit 600)", r.stdout)
            self.assertNotIn("ok.cpp", r.stdout)


if __name__ == "__main__":
    unittest.main()
