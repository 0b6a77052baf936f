//! What a description template may contain: a subset of minijinja, checked
//! on its syntax tree before it is compiled (docs/TOOLS.md, "map_tasks").
//!
//! Why fuel alone is not enough: minijinja repeats (`list * n`) and joins
//! (`a + b`) sequences lazily, and a value named twice is shared, so a few
//! lines of `{% set a = a + a %}` build a list of 2^40 items for a handful of
//! fuel. Printing such a value, or joining it into a string with `~`, walks
//! every item inside one step that fuel only pays for afterwards: the thread
//! spins and the string grows without bound. Without `*`, `set`, `with`,
//! macros and the filters that repeat a value (`batch` and `slice` fill), no
//! template-made value is larger than its expression's share of the
//! template times its item, so every step is bounded by the input and the
//! fuel bounds the number of steps.
//!
//! What remains is what a description needs: text, `{{ expressions }}` over
//! `item` and `index` (attributes, subscripts, arithmetic but `*`,
//! comparisons, `~`, literals, the filters of [`FILTERS`], tests, `range`),
//! `{% if %}` and `{% for %}` (with `loop`, `break` and `continue`).
//!
//! The tree comes from minijinja's `unstable_machinery` parser: an upgrade
//! that changes it fails to compile here rather than letting a construct by.

use minijinja::machinery::ast::{CallArg, Expr, Stmt};
use minijinja::machinery::{ast, parse};

/// Filters a description may use: none of them repeats a value it is given.
pub const FILTERS: &[&str] = &[
    "abs",
    "attr",
    "bool",
    "capitalize",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "first",
    "float",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "sort",
    "split",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
    "urlencode",
    "wordcount",
];

/// Checks `source` against the subset; the error names the construct.
pub fn check(source: &str) -> Result<(), String> {
    // A syntax error is reported by the compile that follows, with its location.
    let Ok(tree) = parse(source, "description", Default::default()) else { return Ok(()) };
    stmt(&tree).map_err(|what| {
        format!(
            "the description template uses {what}, which map_tasks templates do not allow (they may use \
             expressions over `item` and `index`, the filters {}, `range`, `if` and `for`; docs/TOOLS.md, \
             \"map_tasks\")",
            FILTERS.join(", ")
        )
    })
}

fn stmts(body: &[Stmt<'_>]) -> Result<(), String> {
    body.iter().try_for_each(stmt)
}

fn stmt(s: &Stmt<'_>) -> Result<(), String> {
    match s {
        Stmt::Template(t) => stmts(&t.children),
        Stmt::EmitExpr(e) => expr(&e.expr),
        Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => Ok(()),
        Stmt::ForLoop(f) if f.recursive => Err("a recursive `for` loop".into()),
        Stmt::ForLoop(f) => {
            expr(&f.iter)?;
            f.filter_expr.as_ref().map_or(Ok(()), expr)?;
            stmts(&f.body)?;
            stmts(&f.else_body)
        }
        Stmt::IfCond(i) => {
            expr(&i.expr)?;
            stmts(&i.true_body)?;
            stmts(&i.false_body)
        }
        Stmt::Set(_) | Stmt::SetBlock(_) => Err("`set`".into()),
        Stmt::WithBlock(_) => Err("`with`".into()),
        Stmt::Macro(_) | Stmt::CallBlock(_) => Err("a macro".into()),
        Stmt::FilterBlock(_) => Err("a `filter` block".into()),
        Stmt::AutoEscape(_) => Err("`autoescape`".into()),
        Stmt::Do(_) => Err("`do`".into()),
        Stmt::Block(_) | Stmt::Extends(_) => Err("template inheritance".into()),
        Stmt::Import(_) | Stmt::FromImport(_) | Stmt::Include(_) => Err("another template".into()),
    }
}

fn args(args: &[CallArg<'_>]) -> Result<(), String> {
    args.iter().try_for_each(|a| match a {
        CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e) => expr(e),
    })
}

fn exprs(items: &[Expr<'_>]) -> Result<(), String> {
    items.iter().try_for_each(expr)
}

fn expr(e: &Expr<'_>) -> Result<(), String> {
    match e {
        Expr::Var(_) | Expr::Const(_) => Ok(()),
        Expr::Slice(s) => {
            expr(&s.expr)?;
            [&s.start, &s.stop, &s.step].into_iter().flatten().try_for_each(expr)
        }
        Expr::UnaryOp(u) => expr(&u.expr),
        Expr::BinOp(b) if matches!(b.op, ast::BinOpKind::Mul) => Err("`*` (it repeats strings and lists)".into()),
        Expr::BinOp(b) => {
            expr(&b.left)?;
            expr(&b.right)
        }
        Expr::Compare(c) => {
            expr(&c.expr)?;
            c.ops.iter().try_for_each(|op| expr(&op.expr))
        }
        Expr::IfExpr(i) => {
            expr(&i.test_expr)?;
            expr(&i.true_expr)?;
            i.false_expr.as_ref().map_or(Ok(()), expr)
        }
        Expr::Filter(f) if !FILTERS.contains(&f.name) => Err(format!("the filter `{}`", f.name)),
        Expr::Filter(f) => {
            f.expr.as_ref().map_or(Ok(()), expr)?;
            args(&f.args)
        }
        Expr::Test(t) => {
            expr(&t.expr)?;
            args(&t.args)
        }
        Expr::GetAttr(g) => expr(&g.expr),
        Expr::GetItem(g) => {
            expr(&g.expr)?;
            expr(&g.subscript_expr)
        }
        Expr::Call(c) if matches!(&c.expr, Expr::Var(v) if v.id == "range") => args(&c.args),
        Expr::Call(_) => Err("a function call other than `range`".into()),
        Expr::List(l) => exprs(&l.items),
        Expr::Tuple(t) => exprs(&t.items),
        Expr::Map(m) => {
            exprs(&m.keys)?;
            exprs(&m.values)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_of_fields_loops_and_conditions_pass() {
        for ok in [
            "Margin of {{ item.region }}: revenue {{ item.revenue }}, cost {{ item.cost }}",
            "{{ index + 1 }}. {{ item.name | upper }}{% if item.tags %} ({{ item.tags | join(', ') }}){% endif %}",
            "{% for t in item.tags if t != 'x' %}{{ loop.index }}: {{ t ~ '!' }}{% else %}none{% endfor %}",
            "{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ item['k'][i] }}{% endfor %}",
            "{{ item.a - item.b / 2 }} {{ [item.a, 2] | length }} {{ {'k': item.a}.k }} {{ item.s[1:3] }}",
            "{{ item.x if item.x is defined else 'n/a' }}",
            "{% raw %}{{ not a template }} {% set x = 1 %}{% endraw %}",
            "{{ item. }}", // a syntax error is the compile's to report
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    /// Each amplifies a value past what fuel pays for before the step ends.
    #[test]
    fn constructs_that_amplify_a_value_are_refused_by_name() {
        for (bad, named) in [
            ("{{ (range(1000) | list) * 100000 }}", "`*`"),
            ("{{ 'x' ~ item.list * 3 }}", "`*`"),
            ("{% set a = [1] %}{% set a = a + a %}{{ '' ~ a }}", "`set`"),
            ("{% set a %}x{% endset %}", "`set`"),
            ("{% with a = item.l + item.l %}{{ a }}{% endwith %}", "`with`"),
            ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(0) }}", "a macro"),
            ("{{ item.l | batch(1000, item.l) }}", "the filter `batch`"),
            ("{{ item.l | slice(3, item.l) }}", "the filter `slice`"),
            ("{{ dict(a=item) }}", "a function call"),
            ("{{ namespace(a=1) }}", "a function call"),
            ("{% for x in item.t recursive %}{{ loop(x) }}{% endfor %}", "a recursive `for` loop"),
            ("{% filter upper %}x{% endfilter %}", "a `filter` block"),
            ("{% if item %}{{ [item.l * 2] }}{% endif %}", "`*`"),
        ] {
            let e = check(bad).unwrap_err();
            assert!(e.contains(&format!("uses {named}")) && e.contains("docs/TOOLS.md"), "{bad}: {e}");
        }
    }
}
