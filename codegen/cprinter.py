"""sympy -> C for index and size expressions, with integer division.

`sympy.ccode(floor(N / 4))` prints `floor((1.0/4.0)*N)`: float math, wrong for 64-bit indices.
Every symbol this module sees is a positive integer (types.size_symbol) or an index, so a
Rational factor or a Pow with a negative exponent is an exact integer division, printed as `/`.
"""

from __future__ import annotations

import sympy
from sympy.printing.c import C99CodePrinter

# Identifiers the kernel templates declare (codegen/cuda/templates: the vector width V, the
# unroll U, loop indices, ...): a size of the same name (a vocabulary V) would be redeclared,
# so such a size is spelt `size_<name>` in C, its parameter too (bound by the size's name).
TEMPLATE_IDENTIFIERS = frozenset(
    "K U V acc at base blk c cols count e epoch first g i iq is j k k0 last n next nvec part "
    "res row rows stride t tid v v0 rank chunk win_first win_count".split())


def size_c_name(name: str) -> str:
    """The C identifier of size `name` in a kernel."""
    return f"size_{name}" if name in TEMPLATE_IDENTIFIERS else name


class IntCPrinter(C99CodePrinter):
    """Prints integer-valued sympy expressions as 64-bit C integer arithmetic."""

    def _print_Integer(self, expr):
        # LL keeps products of large sizes (N * P) in 64 bits.
        return f"{int(expr)}LL"

    def _print_Rational(self, expr):
        return f"({int(expr.p)}LL / {int(expr.q)}LL)"

    def _print_Symbol(self, expr):
        # sizes are positive (types.size_symbol); rank, element and chunk indices are not
        return size_c_name(expr.name) if expr.is_positive else expr.name

    def _print_Mul(self, expr):
        num, den = [], []
        for factor in expr.as_ordered_factors():
            if factor.is_Rational and not factor.is_Integer:
                if factor.p != 1:
                    num.append(sympy.Integer(factor.p))
                den.append(sympy.Integer(factor.q))
            elif factor.is_Pow and factor.exp.is_Integer and factor.exp < 0:
                den.append(factor.base ** (-factor.exp))
            else:
                num.append(factor)
        text = " * ".join(self._paren(f) for f in num) if num else "1LL"
        if not den:
            return text
        # Multiply first, divide last: exact when the whole product is an integer.
        return f"(({text}) / ({' * '.join(self._paren(d) for d in den)}))"

    def _print_Pow(self, expr):
        if expr.exp.is_Integer and expr.exp > 0:
            return "(" + " * ".join([self._paren(expr.base)] * int(expr.exp)) + ")"
        if expr.exp.is_Integer and expr.exp < 0:
            return f"(1LL / ({self._print_Pow(expr.base ** (-expr.exp))}))"
        raise ValueError(f"index expression must use integer powers, got {expr}")

    def _print_floor(self, expr):
        arg = expr.args[0]
        num, den = sympy.fraction(sympy.together(arg))
        if den == 1:
            return self._print(num)
        return f"(({self._print(num)}) / ({self._print(den)}))"

    def _print_Mod(self, expr):
        a, b = expr.args
        return f"(({self._print(a)}) % ({self._print(b)}))"

    def _paren(self, expr) -> str:
        text = self._print(expr)
        return f"({text})" if isinstance(expr, sympy.Add) else text


_PRINTER = IntCPrinter()


def c_index(expr) -> str:
    """C text of an integer sympy expression (sizes, offsets, element indices)."""
    return _PRINTER.doprint(sympy.sympify(expr))
