#!/usr/bin/env python3
"""Compile OCSF object definitions that the shared export lacks.

The carried definitions (testdata/ocsf/v1.8.0, an export of the OCSF schema
server API) omit a few objects Palisade events carry (os, file, fingerprint,
policy). This script compiles those objects from the OCSF schema source at the
v1.8.0 release into the same API-export shape, so ocsftest can validate them.

Usage:
    compile.py SCHEMA_GIT_DIR COMMIT SHARED_DIR OUT_DIR name...
    compile.py --classes SCHEMA_GIT_DIR COMMIT SHARED_DIR OUT_DIR class...

With --classes it compiles event classes (events/**.json by name) instead,
after the same kind of self-check against every class the export carries.

SCHEMA_GIT_DIR is a git directory of github.com/ocsf/ocsf-schema; COMMIT is
the v1.8.0 release commit (3dcb905d, "v1.8.0 prep", version.json = 1.8.0).

Before writing anything the script compiles every object that the shared
export does contain and compares the two (attribute names, types, object
types, requirements, arrays, enum keys, siblings, profiles, constraints); any
difference aborts, so the compiler is proven against the official export.
Objects patched by an OCSF extension (linux, macos, windows) are outside what
this compiler reproduces: they are skipped by the self-check and refused as
supplement targets.
"""
import json
import os
import subprocess
import sys


def git_json(gitdir, commit, path):
    out = subprocess.run(["git", "--git-dir", gitdir, "show", f"{commit}:{path}"],
                         check=True, capture_output=True).stdout
    return json.loads(out)


def git_exists(gitdir, commit, path):
    r = subprocess.run(["git", "--git-dir", gitdir, "cat-file", "-e", f"{commit}:{path}"],
                       capture_output=True)
    return r.returncode == 0


class Compiler:
    def __init__(self, gitdir, commit):
        self.gitdir, self.commit = gitdir, commit
        self.dictionary = git_json(gitdir, commit, "dictionary.json")
        self.dattrs = self.dictionary["attributes"]
        self.types = self.dictionary["types"]["attributes"]
        self.raw = {}

    def raw_object(self, name):
        if name not in self.raw:
            self.raw[name] = git_json(self.gitdir, self.commit, f"objects/{name}.json")
        return self.raw[name]

    def caption_of_object(self, name):
        if git_exists(self.gitdir, self.commit, f"objects/{name}.json"):
            return self.raw_object(name).get("caption", name)
        return name

    def own_attributes(self, raw):
        """Attributes of one raw object with its $include profiles expanded."""
        attrs = {}
        for key, val in raw.get("attributes", {}).items():
            if key == "$include":
                for inc in val:
                    prof = git_json(self.gitdir, self.commit, inc)
                    pname = prof["name"]
                    for pk, pv in prof.get("attributes", {}).items():
                        pv = dict(pv)
                        pv["profiles"] = [pname]
                        attrs[pk] = merge(attrs.get(pk, {}), pv)
                continue
            attrs[key] = merge(attrs.get(key, {}), val)
        return attrs

    def patched_by_extension(self, name):
        out = subprocess.run(["git", "--git-dir", self.gitdir, "ls-tree", "-r", "--name-only",
                              self.commit, "extensions/"], check=True,
                             capture_output=True, text=True).stdout.split()
        return [p for p in out if p.endswith(f"/objects/{name}.json")]

    def compile(self, name):
        chain, attrs, constraints, profiles = self.flatten(name, self.raw_object)
        out = {k: self.resolve(k, v) for k, v in attrs.items()}
        self.add_datetimes(out, keep_group=False)
        res = {"name": name, "caption": chain[-1].get("caption", name),
               "description": chain[-1].get("description", ""),
               "extends": chain[-1].get("extends"), "attributes": dict(sorted(out.items()))}
        if constraints:
            res["constraints"] = constraints
        if profiles:
            res["profiles"] = profiles
        return res

    def add_datetimes(self, out, keep_group):
        """The datetime profile's <name>_dt sibling of every timestamp."""
        for k in list(out):
            if out[k]["type"] == "timestamp_t" and k + "_dt" not in out:
                dt = {"type": "datetime_t", "caption": out[k].get("caption", k),
                      "requirement": "optional", "profiles": ["datetime"],
                      "type_name": self.types["datetime_t"]["caption"],
                      "description": out[k].get("description", "")}
                if keep_group:
                    dt["group"] = out[k].get("group")
                out[k + "_dt"] = dt

    def flatten(self, name, raw_of):
        """The extends chain of name (root first) and its own attributes,
        last constraints and profiles, merged down the chain."""
        chain = []
        n = name
        while n:
            raw = raw_of(n)
            chain.append(raw)
            n = raw.get("extends")
        chain.reverse()
        attrs, constraints, profiles = {}, {}, []
        for raw in chain:
            for k, v in self.own_attributes(raw).items():
                attrs[k] = merge(attrs.get(k, {}), v)
            if "constraints" in raw:
                constraints = raw["constraints"]
            for p in raw.get("profiles", []) or []:
                if p not in profiles:
                    profiles.append(p)
        return chain, attrs, constraints, profiles

    def resolve(self, key, over, keep_group=False):
        """One attribute: the dictionary's definition merged with the
        class's or object's overrides, enums united."""
        base = dict(self.dattrs.get(key, {}))
        enum = dict(base.get("enum", {}))
        full = merge(base, over)
        if "enum" in over:
            enum.update(over["enum"])
        if enum:
            full["enum"] = enum
        return self.finish(full, keep_group)

    def finish(self, a, keep_group=False):
        a = dict(a)
        explicit = "profile" in a
        prof = a.pop("profile", None)
        if prof is not None and "profiles" not in a:
            a["profiles"] = [prof]
        elif explicit and prof is None:
            # "profile": null in an override takes the attribute out of
            # the profile that $include put it in (system.json: actor).
            a["profiles"] = None
        t = a.get("type", "string_t")
        if t not in self.types and t != "object_t":
            a["object_type"] = t
            a["object_name"] = self.caption_of_object(t)
            a["type"] = "object_t"
        elif t in self.types:
            a["type_name"] = self.types[t].get("caption", t)
        a.setdefault("requirement", "optional")
        a.setdefault("profiles", None)
        if not keep_group:
            a.pop("group", None)
        a.pop("references", None)
        return a


class ClassCompiler(Compiler):
    """Compiles an event class (events/**.json) into the server's export
    shape: the extends chain up to base_event, $include'd profiles,
    dictionary attributes, class_uid/category_uid/type_uid enums."""

    def __init__(self, gitdir, commit):
        super().__init__(gitdir, commit)
        files = subprocess.run(["git", "--git-dir", gitdir, "ls-tree", "-r", "--name-only",
                                commit, "events/"], check=True, capture_output=True,
                               text=True).stdout.split()
        self.events = {}
        for f in files:
            if f.endswith(".json"):
                raw = git_json(gitdir, commit, f)
                if "name" in raw:
                    self.events[raw["name"]] = raw
        self.categories = git_json(gitdir, commit, "categories.json")["attributes"]

    def compile_class(self, name):
        chain, attrs, constraints, profiles = self.flatten(name, self.events.__getitem__)
        assoc, category = {}, None
        for raw in chain:
            assoc = raw.get("associations", assoc)
            category = raw.get("category", category)
        top = chain[-1]
        cat = self.categories[category]
        uid = cat["uid"] * 1000 + top["uid"]
        out = {k: self.resolve(k, v, keep_group=True) for k, v in attrs.items()}
        self.add_datetimes(out, keep_group=True)
        out["class_uid"]["enum"] = {str(uid): {"caption": top["caption"],
                                               "description": top.get("description", "")}}
        out["category_uid"]["enum"] = {str(cat["uid"]): {"caption": cat["caption"], "uid": cat["uid"],
                                                         "description": cat.get("description", "")}}
        types = {}
        for aid, e in sorted(out["activity_id"]["enum"].items(), key=lambda kv: int(kv[0])):
            t = {"caption": f"{top['caption']}: {e['caption']}"}
            if int(aid) not in (0, 99) and "description" in e:
                t["description"] = e["description"]
            types[str(uid * 100 + int(aid))] = t
        out["type_uid"]["enum"] = types
        # The server lists every profile the class or an object it carries
        # can declare; the validator reads this list only to know profile
        # names, so the union of the attributes' profiles stands in for it.
        for a in out.values():
            for p in a.get("profiles") or []:
                if p not in profiles:
                    profiles.append(p)
        res = {"name": name, "caption": top["caption"], "description": top.get("description", ""),
               "uid": uid, "extends": top.get("extends"), "category": category,
               "category_name": cat["caption"], "category_uid": cat["uid"],
               "attributes": dict(sorted(out.items())), "profiles": sorted(profiles)}
        if top.get("references"):
            res["references"] = top["references"]
        if assoc:
            res["associations"] = assoc
        if constraints:
            res["constraints"] = constraints
        return res


def compare(ref, mine, shape_fn):
    """Prints every difference between an exported definition and the
    compiled one; returns how many."""
    ra, rc = shape_fn(ref)
    ma, mc = shape_fn(mine)
    bad = 0
    for k in sorted(set(ra) | set(ma)):
        if ra.get(k) != ma.get(k):
            bad += 1
            print(f"MISMATCH {ref['name']}.{k}: export={ra.get(k)} compiled={ma.get(k)}")
    if rc != mc:
        bad += 1
        print(f"MISMATCH {ref['name']} constraints: export={rc} compiled={mc}")
    return bad


def class_shape(obj):
    attrs, cons = shape(obj)
    for k, v in obj["attributes"].items():
        attrs[k] = attrs[k] + (tuple(sorted((e.get("caption") for e in (v.get("enum") or {}).values()))),)
    return attrs, cons


def main_classes(gitdir, commit, shared, outdir, names):
    """compile.py --classes: self-check against every class the export
    carries, then write the named classes to OUT_DIR/classes."""
    comp = ClassCompiler(gitdir, commit)
    bad = checked = 0
    clsdir = os.path.join(shared, "classes")
    for fn in sorted(os.listdir(clsdir)):
        ref = json.load(open(os.path.join(clsdir, fn)))
        if "attributes" not in ref or ref["name"] not in comp.events or ref.get("category") not in comp.categories:
            continue
        if "supplement" in ref:
            continue  # compiled by this script, not exported by the server
        mine = comp.compile_class(ref["name"])
        checked += 1
        bad += compare(ref, mine, class_shape)
        if ref.get("uid") != mine["uid"] or ref.get("caption") != mine["caption"] or \
                ref.get("category_uid") != mine["category_uid"]:
            bad += 1
            print(f"MISMATCH {ref['name']} uid/caption/category")
    print(f"self-check: {checked} exported classes compared, {bad} mismatches")
    if bad:
        sys.exit(1)
    os.makedirs(os.path.join(outdir, "classes"), exist_ok=True)
    for n in names:
        existing = os.path.join(clsdir, n + ".json")
        if os.path.exists(existing) and "supplement" not in json.load(open(existing)):
            sys.exit(f"{n} is in the export already")
        obj = comp.compile_class(n)
        obj["supplement"] = f"compiled from ocsf/ocsf-schema@{commit} by compile.py --classes"
        with open(os.path.join(outdir, "classes", n + ".json"), "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True, ensure_ascii=False)
            f.write("\n")
        print("wrote class", n)


def merge(base, over):
    res = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(res.get(k), dict) and k != "enum":
            res[k] = merge(res[k], v)
        else:
            res[k] = v
    return res


def shape(obj):
    """Comparable summary of one object definition."""
    attrs = {}
    for k, v in obj["attributes"].items():
        attrs[k] = (v.get("type"), v.get("object_type"), v.get("requirement"),
                    bool(v.get("is_array")), tuple(sorted((v.get("enum") or {}).keys())),
                    v.get("sibling"), tuple(sorted(v.get("profiles") or [])))
    return attrs, obj.get("constraints") or {}


def main():
    args = sys.argv[1:]
    classes = args[:1] == ["--classes"]
    if classes:
        args = args[1:]
    gitdir, commit, shared, outdir, *names = args
    commit = subprocess.run(["git", "--git-dir", gitdir, "rev-parse", commit], check=True,
                            capture_output=True, text=True).stdout.strip()
    version = git_json(gitdir, commit, "version.json")["version"]
    if version != "1.8.0":
        sys.exit(f"{commit} is OCSF {version}, not 1.8.0")
    if classes:
        return main_classes(gitdir, commit, shared, outdir, names)
    comp = Compiler(gitdir, commit)
    objdir = os.path.join(shared, "objects")
    bad = 0
    checked = 0
    for fn in sorted(os.listdir(objdir)):
        ref = json.load(open(os.path.join(objdir, fn)))
        if "attributes" not in ref:
            continue
        if comp.patched_by_extension(ref["name"]):
            # Extensions (linux, macos, windows) patch these; this compiler
            # does not apply extensions, so it cannot reproduce them.
            print(f"skip {ref['name']}: patched by an extension")
            continue
        mine = comp.compile(ref["name"])
        checked += 1
        bad += compare(ref, mine, shape)
    print(f"self-check: {checked} exported objects compared, {bad} mismatches")
    if bad:
        sys.exit(1)
    os.makedirs(os.path.join(outdir, "objects"), exist_ok=True)
    for n in names:
        if os.path.exists(os.path.join(objdir, n + ".json")):
            sys.exit(f"{n} is in the shared export; do not supplement it")
        if comp.patched_by_extension(n):
            sys.exit(f"{n} is patched by an extension; this compiler cannot build it")
        obj = comp.compile(n)
        obj["supplement"] = f"compiled from ocsf/ocsf-schema@{commit} by compile.py"
        with open(os.path.join(outdir, "objects", n + ".json"), "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True, ensure_ascii=False)
            f.write("\n")
        print("wrote", n)


if __name__ == "__main__":
    main()
