"""Projects: list, create, read, patch (SPEC §11.1). A project is named by its slug in paths;
records carry its uuid (`projectId` on an experiment)."""
from __future__ import annotations

from flask import request

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import body_fields, iso, Routes
from models.research import Project
from services.research import narratives, projects

routes = Routes()


def project_json(p: Project, counts: tuple[int, int] | None = None) -> dict:
    data = {"id": str(p.id), "slug": p.slug, "title": p.title, "question": p.question, "summaryMd": p.summary_md,
            "status": p.status, "createdAt": iso(p.created_at), "updatedAt": iso(p.updated_at)}
    if counts is not None:
        data["experimentCount"], data["beliefCount"] = counts
    return data


@routes.get("/projects")
@access.api("read")
def list_projects():
    """Every project, active first; `status` filters (an unknown status is a 400)."""
    counts = projects.counts()
    return {"projects": [project_json(p, counts.get(p.id, (0, 0)))
                         for p in projects.list_projects(request.args.get("status") or None)]}


@routes.post("/projects")
@access.api("write")
def create_project():
    """Create a project (`title` required; `slug` defaults to one made from it); 201 with the record."""
    project = projects.create_project(body_fields(projects.FIELDS), access.actor())
    commit_then_run()
    return {"project": project_json(project, (0, 0))}, 201


@routes.get("/projects/<slug>")
@access.api("read")
def get_project(slug: str):
    """One project by slug, with its published narrative's markdown (null when none is)."""
    project = projects.get_project(slug)
    published = narratives.published(project.id)
    return {"project": project_json(project, projects.counts().get(project.id, (0, 0))),
            "publishedNarrative": None if published is None else {
                "version": published.version, "bodyMd": published.body_md, "publishedAt": iso(published.published_at)}}


@routes.patch("/projects/<slug>")
@access.api("write")
def patch_project(slug: str):
    """Change fields (title, slug, question, summaryMd, status); answers the record."""
    project = projects.get_project(slug)
    changed = projects.update_project(project, body_fields(projects.FIELDS), access.actor())
    commit_then_run()
    return {"project": project_json(project), "changed": changed, "ok": True}
